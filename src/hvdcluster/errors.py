"""User-facing error types.

Anything raised as an :class:`HvdError` is a mistake the user can fix; the CLI prints ``str(err)`` as
one line and exits with ``err.exit_code``. Tracebacks are for bugs only.
"""

from __future__ import annotations

import re

_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")


def _one_line(text: str) -> str:
    return _LINE_BREAKS.sub(" ", text).strip()


class HvdError(Exception):
    """Base for user-facing errors: the CLI prints str(err) as one line and exits with err.exit_code."""

    exit_code = 2


class SpecError(HvdError):
    """A mistake in ``hosts.yaml``, located at a 1-based line and column and named by its field path.

    ``str(err)`` is ``"{path}:{line}:{column}: {field}: {message}"`` on one line, the shape compilers use,
    so editors and terminals can jump to the spot.
    """

    def __init__(self, path: str, line: int, column: int, field: str, message: str) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.field = field
        self.message = message
        super().__init__(path, line, column, field, message)

    def __str__(self) -> str:
        return _one_line(f"{self.path}:{self.line}:{self.column}: {self.field}: {self.message}")
