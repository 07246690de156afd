"""What a follow run's ledger holds after files come and go for weeks: `python -m bench.online.ledger_churn [--files
1000000]` (pure Python, no cluster; tests/test_follow_intake.py runs 100,000).

A file lands each second and is trained, a retention job keeps the newest 50, a version is served every 1,000
files and the ledger compacted then (files gone COMPACT_AFTER_S ago are as many files ago). Prints the ledger's
JSON size at each tenth of the run (flat: the files there or gone lately, and counts) and the CPU a file costs.
"""

from __future__ import annotations

import argparse
import time

from data.pieces import Piece
from online.follow.landing import Landed
from online.follow.ledger import Ledger

KEPT_BY_RETENTION = 50
SERVE_EVERY = 1000


def churned(files: int) -> tuple[Ledger, list[int]]:
    """The ledger after `files` files came, were trained and went, and its JSON size at each tenth of them."""
    ledger, sizes, tenth = Ledger(), [], max(files // 10, 1)
    for number in range(files):
        name = f"part-{number:07d}"
        landed = Landed(name, 100, 1.0, 1.0, dev=1, ino=number or hash(name) % 10**9, head="0:x")
        ledger.add(landed, [Piece(name, 0, 100)], now=float(number))
        ledger.finish((number, 0), 100, float(number), steps=1, skipped=number % 3)
        if number >= KEPT_BY_RETENTION:
            ledger.gone(f"part-{number - KEPT_BY_RETENTION:07d}", float(number))
        if number % SERVE_EVERY == SERVE_EVERY - 1:
            ledger.serve(number // SERVE_EVERY, float(number), {e.name for e in ledger.files})
            ledger.compact(float(number))
        if number % tenth == tenth - 1:
            sizes.append(len(ledger.to_json()))
    return ledger, sizes


def main(files: int) -> None:
    started = time.process_time()
    ledger, sizes = churned(files)
    spent = time.process_time() - started
    print(f"{files:,} files came and went: ledger JSON {', '.join(f'{size:,}' for size in sizes)} bytes at each "
          f"tenth (largest/smallest {max(sizes) / min(sizes):.3f}); {len(ledger.files):,} entries kept, "
          f"{ledger.done_count():,} files counted done; {spent / files * 1e6:.1f} us of CPU a file")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    main(parser.parse_args().files)
