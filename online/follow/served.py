"""What a follow-mode run's ledger tells its readers: what a serving version has trained on (its
trained_through.json), and the run's summary of files, examples and freshness (summary.json's `follow`)."""

from __future__ import annotations

from online.follow.ledger import Ledger


def trained_through(ledger: Ledger, *, version: int, written: float, checkpoint: str, step: int) -> dict:
    """What a serving version has trained on: each file done, and each file it stands inside (and where)."""
    return {"version": version, "written": written, "checkpoint": checkpoint, "optimizer_step": step,
            "files_done": [{"name": e.name, "seq": e.seq, "examples": e.examples, "steps": e.steps, "landed": e.landed,
                            "done": e.finished} for e in ledger.files if e.trained],
            "in_progress": [{"name": e.name, "pieces_done": len(e.done), "pieces": e.piece_count,
                             "through_byte": e.through_byte(), "size": e.size, "examples": e.examples,
                             "steps": e.steps}
                            for e in ledger.files if not e.complete and e.done],
            "not_started": [e.name for e in ledger.files if not e.complete and not e.done]}


def freshness_summary(ledger: Ledger) -> dict:
    """Per file and overall: examples and steps trained, records skipped, what was not trained, and seconds from
    landing to the first serving version that trained on all of it (its freshness); in a healthy run the steps
    of the files add up to the optimizer's. Compacted files count in the totals and in `freshness_s` (its median
    over the newest files served), not in `per_file`."""
    served = ledger.compacted.recent_freshness + [e.freshness_s for e in ledger.files if e.freshness_s is not None]
    freshness = ledger.compacted.freshness(served)
    return {"files_done": ledger.done_count(), "files": ledger.file_count(), "freshness_s": freshness,
            "examples": sum(entry.examples for entry in ledger.files) + ledger.compacted.examples,
            "steps": sum(entry.steps for entry in ledger.files) + ledger.compacted.steps,
            "problems": ledger.problems(),
            "per_file": [{"name": e.name, "examples": e.examples, "steps": e.steps, "skipped": e.skipped,
                          "outcome": e.outcome or "trained", "note": e.note or e.unfinished, "landed": e.landed,
                          "started": e.started, "done": e.finished, "served_version": e.served_version,
                          "freshness_s": None if e.freshness_s is None else round(e.freshness_s, 1)}
                         for e in ledger.files]}
