"""Progress of ``memopt plan`` / ``memopt fit`` / the demo on stderr: bars on a terminal, lines
otherwise.

A phase (``tracing``, ``planning``, ...) shows nothing for its first ``after_s`` seconds. Then:

* **bars** (stderr is a terminal and tqdm is installed, ``pip install "memopt[cli]"``): a phase
  that counts (the planner's offload leads, the sizes ``fit`` tries) is a tqdm bar with its
  count and rate; one that does not is a spinner with the elapsed time. A phase that was shown
  leaves its last line, so the terminal keeps a log of what took time.
* **lines** (no tqdm, or ``--progress`` with stderr not a terminal): a plain line, then another
  every ``every_s`` seconds while the phase lasts, with the latest detail (the planner's best
  plan and bound, see :mod:`memopt.planner.progress`). No terminal control, so logs read well.

A daemon thread does the waiting, so a long trace or solve is not silent. Nothing goes to
stdout. The closing line gives the CPU seconds per phase when the run took over ``after_s``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from memopt.planner import progress as planner_progress

_AFTER = ", after the planner"
REGIONS = "regions"
"""What a tracing phase counts: ``p.phase("tracing", unit=REGIONS)``."""
_SPIN = "|/-\\"


def tqdm_class() -> Any:
    """tqdm's bar class, or None when tqdm is not installed."""
    try:
        from tqdm.std import tqdm
    except ImportError:
        return None

    class Bar(tqdm):
        monitor_interval = 0  # no monitor thread: the heartbeat draws

    return Bar


class Progress:
    """Current phase, its count and detail, drawn by a heartbeat thread."""

    def __init__(
        self,
        cmd: str,
        stream: TextIO | None = None,
        after_s: float = 2.0,
        every_s: float = 10.0,
        bars: bool = False,
    ) -> None:
        self.cmd = cmd
        self.stream = sys.stderr if stream is None else stream
        self.after_s = after_s
        self.every_s = every_s
        self.bars = tqdm_class() if bars else None
        """tqdm's class when drawing bars, else None (lines)."""
        self.seconds: dict[str, float] = {}
        """CPU seconds per phase (``time.process_time``), for the closing line."""
        self._lock = threading.Lock()
        self._phase: str | None = None
        self._detail = ""
        self._unit: str | None = None  # what the phase counts (None: it does not)
        self._total: int | None = None
        self._n = 0
        self._solves = False  # count the planner's solves instead of its leads
        self._bar: Any = None
        self._spin = 0
        self._t0 = self._wall = self._cpu = 0.0
        self._printed = -1.0  # wall time of the last line for this phase (-1: none)
        self._stop = threading.Event()
        self._resume: str | None = None
        self._traced = 0  # regions compiled so far (planner_progress.traced)
        self._resume_unit: str | None = None
        self._started = time.monotonic()

    def phase(
        self,
        name: str | None,
        *,
        unit: str | None = None,
        total: int | None = None,
        solves: bool = False,
    ) -> None:
        """Start phase ``name`` (None: none, e.g. before printing results). With ``unit`` it
        counts (:meth:`advance`); ``solves``: each planner solve inside it counts one."""
        with self._lock:
            self._close_phase()
            self._phase, self._detail, self._printed = name, "", -1.0
            self._unit, self._total, self._n, self._solves = unit, total, 0, solves
            self._wall, self._cpu = time.monotonic(), time.process_time()

    def detail(self, text: str) -> None:
        with self._lock:
            self._detail = text
            if self._bar is not None:
                self._bar.set_postfix_str(text, refresh=False)

    def advance(self, n: int = 1) -> None:
        """``n`` more of what the phase counts."""
        with self._lock:
            self._n += n
            if self._bar is not None:
                self._bar.update(n)

    def _close_phase(self) -> None:
        if self._phase is not None:
            cpu = time.process_time() - self._cpu
            self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + cpu
        if self._bar is not None:
            self._bar.set_description_str(self._desc(), refresh=False)
            self._bar.close()
            self._bar = None

    def tick(self) -> None:
        """Draw the phase if it is due: a bar refresh, or a line."""
        with self._lock:
            if self._phase is None:
                return
            ran = time.monotonic() - self._wall
            if self.bars is not None:
                if ran >= self.after_s:
                    self._draw_bar(ran)
                return
            due = self.after_s if self._printed < 0 else self._printed + self.every_s
            if ran < due:
                return
            self._printed = ran
            line = f"memopt {self.cmd}: {self._phase} ({ran:.0f} s{self._count(ran)})"
            if self._detail:
                line += f": {self._detail}"
        print(line, file=self.stream)
        self.stream.flush()

    def _count(self, ran: float) -> str:
        if self._unit is None:
            return ""
        of = "" if self._total is None else f" of {self._total}"
        rate = f", {self._n / ran:.1f}/s" if ran >= 1 else ""
        return f", {self._n}{of} {self._unit}{rate}"

    def _desc(self) -> str:
        return f"memopt {self.cmd}: {self._phase}"

    def _draw_bar(self, ran: float) -> None:
        if self._bar is None:
            self._bar = self.bars(
                total=self._total,
                initial=self._n,
                desc=self._desc(),
                unit=f" {self._unit}" if self._unit else "it",
                bar_format=None if self._unit else "{desc} [{elapsed}{postfix}]",
                file=self.stream,
                **_shape(self.stream),
                leave=True,
                delay=1e-9,  # no drawing from tqdm's constructor; the first draw is below
                mininterval=0.25,
            )
            if self._detail:
                self._bar.set_postfix_str(self._detail, refresh=False)
            self._bar.start_t = self._bar._time() - ran  # the phase began before the bar
            self._bar.initial = 0  # the rate counts from the phase's start
        if self._unit is None:
            self._spin += 1
            desc = f"{self._desc()} {_SPIN[self._spin % len(_SPIN)]}"
            self._bar.set_description_str(desc, refresh=False)
        self._bar.refresh()
        self._bar.last_print_t = self._bar._time()

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

    def _planner_note(self, message: str | planner_progress.Step | planner_progress.Traced) -> None:
        if isinstance(message, planner_progress.Traced):
            with self._lock:
                self._traced += 1
                counts = self._unit == REGIONS
            if counts:
                self.advance()
            return
        if isinstance(message, planner_progress.Step):
            self.advance(message.n)
            return
        with self._lock:
            resume, solves, unit = self._phase, self._solves, self._unit
        if solves:  # a phase that counts whole solves (fit: one per size tried)
            self.detail(message)
            if message.startswith("solved"):
                self.advance()
            return
        if message.startswith("solving"):
            self._resume = (resume or "").removesuffix(_AFTER)
            self._resume_unit = unit
            self.phase("planning", unit="leads")
        self.detail(message)
        if message.startswith("lead "):
            self.advance()
        if message.startswith("solved") and self._resume:
            # a trace goes on compiling after its planner, counting on; other phases resume
            if self._resume == "tracing":
                self.phase("tracing" + _AFTER, unit=self._resume_unit)
                if self._resume_unit == REGIONS:
                    self.advance(self._traced)
            else:
                self.phase(self._resume)


def _shape(stream: TextIO) -> dict[str, int | None]:
    """tqdm's ``ncols`` and ``nrows``: the terminal's, or 80 x 24 for one that reports 0 x 0
    (a bare pty: tqdm would then cut every line to nothing); None for a stream without a file
    descriptor (tests: no cut)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return {"ncols": None, "nrows": None}
    try:
        cols, rows = os.get_terminal_size(fd)
    except OSError:
        cols = rows = 0
    return {"ncols": cols if cols > 0 else 80, "nrows": rows if rows > 0 else 24}


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def reporting(cmd: str, enabled: bool | None) -> Iterator[Progress]:
    """A running :class:`Progress` on stderr when ``enabled`` (None: when stderr is a
    terminal), drawing bars when stderr is a terminal and tqdm is installed, else lines; when
    not enabled, one that only counts (nothing printed)."""
    tty = _isatty(sys.stderr)
    p = Progress(cmd, bars=tty)
    if not (tty if enabled is None else enabled):
        yield p
        return
    with p.running():
        yield p
