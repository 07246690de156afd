"""User errors: one line per problem (field, bad value, fix) and exit code 2, never a traceback."""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any, Callable

USER_ERROR_EXIT_CODE = 2  # the launcher does not restart a task that exits with it
CLUSTER_UNAVAILABLE_EXIT_CODE = 3  # a task this one needs did not answer; restarting may help
PREEMPTED_EXIT_CODE = 4  # the chief was asked to stop (SIGTERM), wrote a checkpoint and exited; resumable
DISK_FULL_EXIT_CODE = 5  # a task found the disk it writes to full; a restart would meet the same wall
CHIEF_REPLACED_EXIT_CODE = 6  # a ps under Kubernetes saw a new chief: its pod is replaced, holding nothing old
MAX_VALUE_CHARS = 200  # a value echoed in an error is cut after this many characters


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mistake in the user's input, phrased so it can be fixed without reading code."""

    field: str
    value: Any
    problem: str
    fix: str

    def line(self, source: str = "") -> str:
        return f"error: {self.text(source)}"

    def text(self, source: str = "") -> str:
        """The line without its `error: ` prefix; always one line, however odd the field or value."""
        where = f"{source}: " if source else ""
        return f"{where}{printable(self.field)} = {shortened(repr(self.value))}: {self.problem}; {self.fix}"


def printable(text: str) -> str:
    """`text` with line breaks and other control characters escaped, so a key from the file cannot split a line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def shortened(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class UserError(Exception):
    """Raised for mistakes the user can fix; carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem] | Problem, source: str = ""):
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        self.source = source
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [p.line(self.source) for p in self.problems]


def exit_on_user_error(prefix: str = "") -> Callable:
    """Decorates an entrypoint so a UserError prints its lines to stderr and exits 2."""

    def decorate(main: Callable) -> Callable:
        @functools.wraps(main)
        def wrapper(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except UserError as error:
                for line in error.lines():
                    print(f"{prefix}{line}", file=sys.stderr, flush=True)
                sys.exit(USER_ERROR_EXIT_CODE)

        return wrapper

    return decorate
