"""User-facing errors. Each one names the file and the key at fault and maps to an exit code.

A stack file with several mistakes raises one :class:`ConfigError` holding every :class:`Problem`, in
file order, each printed like a compiler's diagnostic: ``file:line:col  key.path  message``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXIT_OK = 0
EXIT_POLICY = 1
"""A mandatory policy failed; every artifact was still written."""
EXIT_USAGE = 2
"""Bad input: a config, a flag or an argument. Nothing was written."""
EXIT_INTERNAL = 3
"""An internal error: amlgpu itself failed (a bug, or the machine ran out of memory), not the stack's input.
Nothing was written for the stack it hit; with several stacks, the others were still planned and written."""
EXIT_NOTHING_CHECKED = 4
"""``amlgpu preflight``: every live check was UNKNOWN (no credentials, no subscription, a refused token): nothing
was checked, which a CI step must not read as a pass (nor as amlgpu failing: not :data:`EXIT_INTERNAL`).
docs/operations.md, preflight."""


def internal_error(err: BaseException, *, stack: str | None = None) -> str:
    """The one line printed for an unexpected exception: which stack, what kind of failure, and a request to
    report it (the exception's own text may hold a stack file's values: callers mask it)."""
    where = f"stack {stack!r}: " if stack is not None else ""
    detail = str(err).splitlines()[0][:200] if str(err) else ""
    return (f"{where}internal error ({type(err).__name__}{': ' + detail if detail else ''}): amlgpu failed, not "
            "the stack file; nothing was written for this stack. Please report it (the stack file that triggers "
            "it and this line) at the project's issue tracker")


class UserError(Exception):
    """An error the user can fix; printed without a traceback."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None) -> None:
        self.message = message
        self.file = file
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.file, self.key) if part)
        return f"{where}: {self.message}" if where else self.message

    def report(self) -> str:
        """What the CLI prints on stderr."""
        return f"error: {self}"


@dataclass(frozen=True)
class Problem:
    """One mistake in a stack file: the key at fault, what is wrong, and where (0: position unknown)."""

    key: str
    message: str
    line: int = 0
    column: int = 0

    def render(self, file: str | None) -> str:
        """``file:line:col  key  message`` (the position left out when unknown)."""
        where = file or ""
        if self.line:
            where += f":{self.line}:{self.column}" if self.column else f":{self.line}"
        return "  ".join(part for part in (where, self.key, self.message) if part)


class ConfigError(UserError):
    """A stack file that cannot become a valid stack model.

    Raised with ``message``/``key`` for one mistake, or with ``problems`` for all of a file's (kept in
    file order, those without a position last); then ``message`` and ``key`` are the first problem's.
    """

    def __init__(self, message: str = "", *, file: str | None = None, key: str | None = None,
                 problems: Sequence[Problem] = ()) -> None:
        self.problems = tuple(sorted(problems, key=lambda p: (p.line == 0, p.line, p.column)))  # file order
        if self.problems:
            message, key = self.problems[0].message, self.problems[0].key
        super().__init__(message, file=file, key=key)

    def __str__(self) -> str:
        if not self.problems:
            return super().__str__()
        return "\n".join(problem.render(self.file) for problem in self.problems)

    def report(self) -> str:
        if not self.problems:
            return super().report()
        count = len(self.problems)
        return f"{self}\nerror: {count} problem{'s' if count != 1 else ''} in {self.file}"
