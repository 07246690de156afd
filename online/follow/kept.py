"""What a follow-mode chief keeps from beat to beat, measured: each bounded structure's size, for the progress line,
`sh run.sh status` and summary.json (`follow.kept`); the bounds are docs/online-training.md's "Bounded over weeks"."""

from __future__ import annotations

from cluster.run_files import EvaluationState, RunFiles

WORDS = (("ledger_files", "files in the ledger"), ("once_lines", "once-only lines"),
         ("clock_advances", "clock advances"), ("delta_chain", "deltas in the chain"),
         ("evaluated_names", "evaluated names"))


def kept_sizes(*, ledger, said, deltas, files: RunFiles | None = None) -> dict[str, int]:
    """The ledger's files (compacted ones aside), the once-only lines' keys, the deltas' (`deltas`: a FollowDeltas
    or None) stamp clock advances and chain, and with `files` the names in the evaluator's evaluated.json."""
    sizes = {"ledger_files": len(ledger.files), "once_lines": len(said)}
    if deltas is not None:
        sizes.update(deltas.sizes())
    if files is not None and files.evaluated.exists():
        sizes["evaluated_names"] = len(EvaluationState.load(files).evaluated)
    return sizes


def kept_text(sizes: dict[str, int]) -> str:
    """`kept 12 files in the ledger, 340 once-only lines, ...` (the progress line's last part)."""
    return "kept " + ", ".join(f"{sizes[key]} {words}" for key, words in WORDS if key in sizes)
