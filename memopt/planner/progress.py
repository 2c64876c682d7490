"""Progress of a long solve, for whoever wants to show it (the CLI prints it to stderr).

The solver calls :func:`note` at each stage; nothing happens unless a caller installed a
listener with :func:`listening`. A context variable, so the lead's passes need no argument to
pass it through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

Listener = Callable[[str], None]

_listener: ContextVar[Listener | None] = ContextVar("memopt_planner_progress", default=None)


def note(message: str) -> None:
    """Tell the listener, if any, what the solver is doing."""
    listener = _listener.get()
    if listener is not None:
        listener(message)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the solver's progress messages to ``listener`` inside the block."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
