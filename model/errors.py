"""User-facing errors. Each one names the file and the key at fault and maps to an exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_POLICY = 1
"""A mandatory policy failed; every artifact was still written."""
EXIT_USAGE = 2
"""Bad input: a config, a flag or an argument. Nothing was written."""


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


class ConfigError(UserError):
    """A stack file that cannot become a valid stack model."""
