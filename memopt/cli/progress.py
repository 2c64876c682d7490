"""Progress lines on stderr while ``memopt plan`` / ``memopt fit`` work.

A phase (``tracing``, ``planning``, ...) that has run for ``after_s`` seconds gets a line, and
another every ``every_s`` seconds while it lasts, with the latest detail (the planner's best
plan and bound, see :mod:`memopt.planner.progress`). Runs under ``after_s`` print nothing.
A daemon thread does the waiting, so a long trace or solve is not silent. Plain lines: no
terminal control, so logs read as well as terminals.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from memopt.planner import progress as planner_progress

_AFTER = ", after the planner"


class Progress:
    """Current phase and detail, printed by a heartbeat thread."""

    def __init__(
        self, cmd: str, stream: TextIO | None = None, after_s: float = 2.0, every_s: float = 10.0
    ) -> None:
        self.cmd = cmd
        self.stream = sys.stderr if stream is None else stream
        self.after_s = after_s
        self.every_s = every_s
        self.seconds: dict[str, float] = {}
        """CPU seconds per phase (``time.process_time``), for the closing line."""
        self._lock = threading.Lock()
        self._phase: str | None = None
        self._detail = ""
        self._t0 = self._wall = self._cpu = 0.0
        self._printed = -1.0  # wall time of the last line for this phase (-1: none)
        self._stop = threading.Event()
        self._resume: str | None = None
        self._started = time.monotonic()

    def phase(self, name: str) -> None:
        with self._lock:
            self._close_phase()
            self._phase, self._detail, self._printed = name, "", -1.0
            self._wall, self._cpu = time.monotonic(), time.process_time()

    def detail(self, text: str) -> None:
        with self._lock:
            self._detail = text

    def _close_phase(self) -> None:
        if self._phase is not None:
            cpu = time.process_time() - self._cpu
            self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + cpu

    def tick(self) -> None:
        """Print a line if the phase is due one."""
        with self._lock:
            if self._phase is None:
                return
            now = time.monotonic()
            ran = now - self._wall
            due = self.after_s if self._printed < 0 else self._printed + self.every_s
            if ran < due:
                return
            self._printed = ran
            detail = f": {self._detail}" if self._detail else ""
        print(f"memopt {self.cmd}: {self._phase} ({ran:.0f} s){detail}", file=self.stream)
        self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.tick()

    @contextlib.contextmanager
    def running(self) -> Iterator[Progress]:
        """Heartbeat thread and planner messages inside the block; a closing line with CPU
        seconds per phase when the whole run took longer than ``after_s``."""
        thread = threading.Thread(target=self._run, name="memopt-progress", daemon=True)
        thread.start()
        try:
            with planner_progress.listening(self._planner_note):
                yield self
        finally:
            self._stop.set()
            thread.join()
            with self._lock:
                self._close_phase()
                self._phase = None
            if time.monotonic() - self._started >= self.after_s and self.seconds:
                parts = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
                print(f"memopt {self.cmd}: CPU time {parts}", file=self.stream)

    def _planner_note(self, message: str) -> None:
        with self._lock:
            resume = self._phase
        if message.startswith("solving"):
            self._resume = (resume or "").removesuffix(_AFTER)
            self.phase("planning")
        self.detail(message)
        if message.startswith("solved") and self._resume:
            # a trace goes on compiling after its planner; other phases simply resume
            self.phase(self._resume + (_AFTER if self._resume == "tracing" else ""))


@contextlib.contextmanager
def reporting(cmd: str, enabled: bool | None) -> Iterator[Progress]:
    """A running :class:`Progress` when ``enabled`` (None: when stderr is a terminal); else
    one that only counts (nothing printed)."""
    p = Progress(cmd)
    if not (sys.stderr.isatty() if enabled is None else enabled):
        yield p
        return
    with p.running():
        yield p
