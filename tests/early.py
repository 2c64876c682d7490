"""Slow tests whose work is other processes' (a gloo world of two, torchrun, a benchmark script)
start that work when collection ends, so that it overlaps the rest of the suite on the CI box's
second core (a compile is mostly single-threaded Python), as tests/test_zoo.py's models do.

A module's ``start_early(items)`` (called by tests/conftest.py) submits the job of each of its
selected tests; the test calls :func:`result` with the same arguments, which submits the job if
it was not started early (the file run alone) and waits for it; the test's assertions are then
made on what the job left: its exit status, its output and the files in its own folder. The jobs
run one at a time, in the order the tests were collected. What each job runs is what the test
ran itself before (the same command, environment and timeout; a job's temporary folder takes
the place of the test's ``tmp_path``).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: makes a job's command and the variables it adds to the environment from its temporary folder
Make = Callable[[Path], "tuple[list[str], dict[str, str]]"]


@dataclass
class Done:
    """A finished job: its exit status, its output and its temporary folder."""

    returncode: int
    stdout: str
    stderr: str
    tmp: Path


class _Job:
    def __init__(self, make: Make, timeout: float) -> None:
        self.make, self.timeout = make, timeout
        # the environment when the job is queued: a test running beside it may monkeypatch
        # this process's (MEMOPT_CONFIG, cache folders)
        self.environ = dict(os.environ)
        self.tmp = Path(tempfile.mkdtemp(prefix="memopt-early-"))
        self.finished = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.done: Done | None = None

    def run(self) -> None:
        out, err = self.tmp / "stdout.txt", self.tmp / "stderr.txt"
        try:
            if _STOPPED:
                raise RuntimeError("the session ended before this job started")
            argv, extra = self.make(self.tmp)
            env = {**self.environ, **extra}
            with open(out, "w") as o, open(err, "w") as e:
                self.proc = subprocess.Popen(
                    argv, cwd=ROOT, env=env, stdout=o, stderr=e, text=True, start_new_session=True
                )
                try:
                    code = self.proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    _kill(self.proc)
                    code = self.proc.wait()
                    e.write(f"\n[tests/early.py: killed after the {self.timeout:.0f} s timeout]\n")
            self.done = Done(code, out.read_text(), err.read_text(), self.tmp)
        except Exception as exc:  # the command could not start: the test fails with the reason
            self.done = Done(-1, "", f"tests/early.py: {type(exc).__name__}: {exc}", self.tmp)
        finally:
            self.finished.set()


_JOBS: dict[str, _Job] = {}
_QUEUE: queue.Queue = queue.Queue()
_LOCK = threading.Lock()
_LANE: list[threading.Thread] = []
_STOPPED: list[bool] = []  # non-empty once the session is over


def _lane() -> None:
    while not _STOPPED:
        job = _QUEUE.get()
        if _STOPPED:
            break
        job.run()


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the job and its children (ranks, workers)
        except ProcessLookupError:
            pass


def submit(key: str, make: Make, timeout: float) -> None:
    """Queue the job ``key`` (once)."""
    with _LOCK:
        if key in _JOBS:
            return
        _JOBS[key] = job = _Job(make, timeout)
        _QUEUE.put(job)
        if not _LANE:
            _LANE.append(threading.Thread(target=_lane, name="tests-early", daemon=True))
            _LANE[0].start()


def result(key: str, make: Make, timeout: float) -> Done:
    """The finished job ``key`` (submitted now if it was not started early)."""
    submit(key, make, timeout)
    job = _JOBS[key]
    job.finished.wait()
    assert job.done is not None
    return job.done


def selected(items: Sequence, module: str, name: str) -> bool:
    """Whether the test ``name`` of ``module`` (its ``__name__``) is among the session's items."""
    return any(
        getattr(getattr(item, "module", None), "__name__", None) == module
        and getattr(item, "originalname", None) == name
        for item in items
    )


@atexit.register
def _stop() -> None:
    """Session over (or interrupted): end a running job, drop the folders."""
    _STOPPED.append(True)
    for job in _JOBS.values():
        if job.proc is not None:
            _kill(job.proc)
    for job in _JOBS.values():
        shutil.rmtree(job.tmp, ignore_errors=True)
