"""The one exception type of ``memopt plan`` / ``memopt fit``: a message and an exit code."""

from __future__ import annotations

#: Exit codes (also in docs/cli.md).
EXIT_OK = 0
EXIT_NOTHING_FITS = 1
EXIT_USAGE = 2
EXIT_MODEL = 3
EXIT_TRACE = 4


class CliError(Exception):
    """A user-facing failure: ``str(e)`` is the one-line message, ``e.code`` the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def one_line(e: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (tracebacks and long torch dumps cut)."""
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > limit:
        first = first[: limit - 3] + "..."
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
