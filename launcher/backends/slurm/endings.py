"""Why a Slurm job ended under the run, named by its cause from `scontrol show job` and the job's own output."""

from __future__ import annotations

import re
import time
from typing import Callable

ENDINGS = {
    "TIMEOUT": "it reached its time limit ({limit}; slurm.time_limit)",
    "CANCELLED": "it was cancelled with scancel by a user or an administrator, not by this launcher",
    "PREEMPTED": "Slurm preempted it for a job of higher priority",
    "NODE_FAIL": "one of its nodes failed",
    "BOOT_FAIL": "its nodes failed to boot",
    "DEADLINE": "it reached its deadline",
    "OUT_OF_MEMORY": "it ran out of memory",
    "FAILED": "its batch script failed",
    "COMPLETED": "its batch script ended",
}
BANNER = re.compile(r"\*\*\* JOB \d+ ON (\S+) CANCELLED AT (\S+)(?: DUE TO ([A-Z ]+?))?(?:,.*)? \*\*\*")
DUE_TO = {"TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}
WARNING = "pscluster: Slurm --signal says the time limit is near"  # what the batch shell prints when warned
RESUME = "`sh run.sh` again (without --fresh) resumes from the last checkpoint"
SETTLE_S = 20.0  # how long a COMPLETING job may hide its final state before the ending is named as it stands


def state_of(fields: dict[str, str], output: str) -> str:
    """The job's final state; while it is still COMPLETING, the state its Reason or the banner slurmstepd wrote
    into the job's output names (TimeLimit -> TIMEOUT, ...)."""
    state = fields.get("JobState", "")
    if state and state not in ("COMPLETING", "RUNNING"):
        return state
    if fields.get("Reason") == "TimeLimit":
        return "TIMEOUT"
    banner = BANNER.search(output)
    if banner:
        return DUE_TO.get(banner[3] or "", "CANCELLED")
    return state or "GONE"


def cause(job_id: str, fields: dict[str, str], output: str) -> str:
    """One line: the job, its state as Slurm names it, why, and what the user can do."""
    state = state_of(fields, output)
    why = ENDINGS.get(state, "Slurm no longer lists it" if state == "GONE" else "")
    why = why.format(limit=fields.get("TimeLimit", "?"))
    banner = BANNER.search(output)
    when = f" at {banner[2]}" if banner else (f" at {fields['EndTime']}" if fields.get("EndTime", "Unknown")
                                              not in ("Unknown", "") else "")
    advice = {"TIMEOUT": f"raise slurm.time_limit; {RESUME}", "PREEMPTED": RESUME, "CANCELLED": RESUME,
              "NODE_FAIL": RESUME}.get(state, f"see `scontrol show job {job_id}`")
    return f"job {job_id} ended{when}: {state}{' (' + why + ')' if why else ''}; {advice}"


def settled_cause(job_id: str, fields: dict[str, str], ask: Callable[[], dict[str, str]],
                  read_output: Callable[[], str], timeout_s: float = SETTLE_S, pause_s: float = 0.5) -> str:
    """cause() once the job shows why it ended: while it is COMPLETING with neither Reason nor banner (slurmstepd
    writes the banner as it ends the steps, slurmctld the final state after), asks again for up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    output = read_output()
    while state_of(fields, output) == "COMPLETING" and time.monotonic() < deadline:
        time.sleep(pause_s)
        fields, output = ask() or fields, read_output()
    return cause(job_id, fields, output)


def warned(output: str, marker: str) -> bool:
    """Whether the job's batch shell has written `marker`: Slurm's --signal reached it before the time limit."""
    return marker in output


def seconds_left(fields: dict[str, str], now: float) -> float | None:
    """Seconds until the job's EndTime (Slurm prints local time), None when it has none (no time limit)."""
    try:
        return time.mktime(time.strptime(fields.get("EndTime", ""), "%Y-%m-%dT%H:%M:%S")) - now
    except ValueError:
        return None
