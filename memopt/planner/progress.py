"""Progress of a long solve, for whoever wants to show it (the CLI draws it on stderr).

The solver calls :func:`note` at each stage, code that does a counted piece of work (a size
tried) may call :func:`advance`, and memopt's state calls :func:`traced` for each region; nothing happens unless a caller
installed a listener with :func:`listening`. A context variable, so the lead's passes need no
argument to pass it through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """``n`` more of what the current phase counts (the listener knows what it counts)."""

    n: int = 1


@dataclass(frozen=True)
class Traced:
    """One more region compiled (a trace counts its regions whatever phase it is in)."""


Listener = Callable[[str | Step | Traced], None]

_listener: ContextVar[Listener | None] = ContextVar("memopt_planner_progress", default=None)


def note(message: str) -> None:
    """Tell the listener, if any, what the solver is doing."""
    listener = _listener.get()
    if listener is not None:
        listener(message)


def advance(n: int = 1) -> None:
    """Tell the listener, if any, that ``n`` more counted things are done."""
    listener = _listener.get()
    if listener is not None:
        listener(Step(n))


def traced() -> None:
    """Tell the listener, if any, that one more region was compiled."""
    listener = _listener.get()
    if listener is not None:
        listener(Traced())


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the solver's progress messages to ``listener`` inside the block."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
