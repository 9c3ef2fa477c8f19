"""The one error local emulation raises for input the user can fix."""

from __future__ import annotations


class EmulationError(Exception):
    """A run that cannot be emulated as asked.

    ``key`` is either a flag (``--nodes``) or a key of the run's declaration relative to the run
    (``distribution.process_count_per_instance``, ``inputs.data``); the command turns the latter into
    the stack file's key.
    """

    def __init__(self, message: str, *, key: str) -> None:
        self.message = message
        self.key = key
        super().__init__(f"{key}: {message}")

    @property
    def is_flag(self) -> bool:
        return self.key.startswith("--")
