"""What one look at a followed folder costs: `python -m bench.online.folder_look [--files 100000]` (pure Python, no
cluster).

Writes that many tiny files into a temporary folder, then times, with the ledger holding none of them, the look
that first sees them (a stat each) and the one that takes them (whole-file check and head of each), and, with a
ledger holding all of them, a look as a restarted chief makes it (the folder listed, KNOWN_STATS_PER_LOOK known
names stat'ed, none opened), and its copy of the ledger's names. Run it alone for figures.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from online.follow.landing import Landing
from online.follow.ledger import Ledger
from data.pieces import Piece
from data.whole_files import verdict_of, text_missing


def timed(action):
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def main(files: int) -> None:
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        for number in range(files):
            (root / f"part-{number:07d}").write_bytes(b"1\n")
        ledger = Ledger()
        landing = Landing(root, "*", lambda path: verdict_of(text_missing(path)), known=ledger.known)
        first, first_s = timed(lambda: landing.look(now=time.time()))
        taking, taking_s = timed(lambda: landing.look(now=time.time() + 1))
        for landed in taking.landed:
            ledger.add(landed, [Piece(landed.name, 0, landed.size)], now=time.time())
        restarted = Landing(root, "*", lambda path: verdict_of(text_missing(path)),
                            known=Ledger.from_json(ledger.to_json()).known)
        look, look_s = timed(lambda: restarted.look(now=time.time() + 2))
        _, known_s = timed(ledger.known)
        print(f"{files} files: first look (stat each) {first_s:.2f} s, {first.stats} stats; taking look "
              f"{taking_s:.2f} s, {len(taking.landed)} taken, {taking.opened} opened; restarted chief's look "
              f"{look_s:.2f} s: {look.listed} listed, {look.stats} stat'ed, {look.opened} opened (of which the "
              f"ledger's names copied in {known_s:.3f} s); ledger JSON {len(ledger.to_json()) / 1e6:.1f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    main(parser.parse_args().files)
