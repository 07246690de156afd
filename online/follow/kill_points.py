"""The chief's named steps of publication, where a test may stop it dead (PSCLUSTER_KILL_AT) to show that a kill
at each heals as docs/online-training.md's table says ("What a reader may rely on")."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

STEPS = ("settled_checkpoint", "safe_to_delete", "version_checkpoint", "version_published", "delta_published")
KILL_AT = "PSCLUSTER_KILL_AT"  # "<folder>:<step>,<step>,...": for tests only, never set in a real run
GO_AHEAD_S = 120.0  # a step reached waits this long at most for the test's go-ahead


def reached(step: str) -> None:
    """The chief has taken `step`. When PSCLUSTER_KILL_AT names it as the first of its steps not killed at yet, the
    step is marked in the folder (`<folder>/<step>`), the test is waited for (it kills a ps meanwhile, then creates
    `<folder>/<step>.go`) and this process is SIGKILLed; a restarted chief goes on to the next step named."""
    if step not in STEPS:
        raise ValueError(f"{step!r} is not one of the named steps {STEPS}")
    setting = os.environ.get(KILL_AT)
    if not setting:
        return
    folder, _, steps = setting.rpartition(":")
    marks = Path(folder)
    left = [name for name in steps.split(",") if not (marks / name).exists()]
    if not left or left[0] != step:
        return
    (marks / step).write_text(f"{os.getpid()}\n")
    go, waited = marks / f"{step}.go", threading.Event()
    for _ in range(int(GO_AHEAD_S / 0.1)):
        if go.exists():
            break
        waited.wait(0.1)
    os.kill(os.getpid(), signal.SIGKILL)
