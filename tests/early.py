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

The tests of tests/conftest.py's ``ASIDE`` files run the same way in a second pytest process,
started when collection ends on a lane of its own (:func:`start_aside`): their items here come
last and take the outcomes that process reports.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
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
    started: float = 0.0  # time.time() when the command started


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
                started = time.time()
                self.proc = subprocess.Popen(
                    argv, cwd=ROOT, env=env, stdout=o, stderr=e, text=True, start_new_session=True
                )
                try:
                    code = self.proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    _kill(self.proc)
                    code = self.proc.wait()
                    e.write(f"\n[tests/early.py: killed after the {self.timeout:.0f} s timeout]\n")
            self.done = Done(code, out.read_text(), err.read_text(), self.tmp, started)
        except Exception as exc:  # the command could not start: the test fails with the reason
            self.done = Done(-1, "", f"tests/early.py: {type(exc).__name__}: {exc}", self.tmp)
        finally:
            self.finished.set()


_JOBS: dict[str, _Job] = {}
_QUEUES: dict[str, queue.Queue] = {}  # lane name -> its jobs, run one at a time by its thread
_LOCK = threading.Lock()
_STOPPED: list[bool] = []  # non-empty once the session is over


def _lane(jobs: queue.Queue) -> None:
    while not _STOPPED:
        job = jobs.get()
        if _STOPPED:
            break
        job.run()


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the job and its children (ranks, workers)
        except ProcessLookupError:
            pass


def submit(key: str, make: Make, timeout: float, lane: str = "early") -> None:
    """Queue the job ``key`` (once) on ``lane``: each lane runs its jobs one at a time, beside
    the other lanes."""
    with _LOCK:
        if key in _JOBS:
            return
        _JOBS[key] = job = _Job(make, timeout)
        if lane not in _QUEUES:
            _QUEUES[lane] = queue.Queue()
            thread = threading.Thread(
                target=_lane, args=(_QUEUES[lane],), name=f"tests-{lane}", daemon=True
            )
            thread.start()
        _QUEUES[lane].put(job)


def result(key: str, make: Make, timeout: float, lane: str = "early") -> Done:
    """The finished job ``key`` (submitted now if it was not started early)."""
    submit(key, make, timeout, lane)
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


# --- files run aside: a second pytest process beside this one ---------------------------------

#: Set in the second pytest process: the file it appends its test reports to (JSON lines).
ASIDE_REPORTS = "MEMOPT_TESTS_ASIDE_REPORTS"
#: The aside process's limit: its tests took 1,368 s alone on one core of a 2-core machine
#: like CI's (fortieth session), a slow or loaded runner took over 2,400 s beside the main
#: process (the thirty-ninth session's landing run, killed), and stop 61's over 3,600 s
#: (killed with 27 tests to go, the main lane done): the limit is what CI's 90 minutes leave
#: after the install. A test that runs longer than :data:`_ASIDE_STACKS_S` has every thread's
#: stack written to the process's stderr; a killed run lists where its time went.
_ASIDE_KEY, _ASIDE_TIMEOUT, _ASIDE_STACKS_S = "aside", 4800.0, 900


def in_aside_process() -> bool:
    return bool(os.environ.get(ASIDE_REPORTS))


def _aside_job(nodeids: Sequence[str]) -> Make:
    def make(tmp: Path) -> tuple[list[str], dict[str, str]]:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=25"]
        argv += ["-o", f"faulthandler_timeout={_ASIDE_STACKS_S}", *nodeids]
        return argv, {ASIDE_REPORTS: str(tmp / "reports.jsonl"), "PYTHONUNBUFFERED": "1"}

    return make


def start_aside(items: Sequence) -> None:
    """Run ``items`` (the session's tests of tests/conftest.py's ``ASIDE`` files, placed last
    by it) in one pytest process of their own, started now on a lane of its own: their
    compiles overlap this process's. Each item here does no setup of its own and, when its turn
    comes, waits for that process and takes the outcome its reports give it."""
    make = _aside_job([item.nodeid for item in items])
    submit(_ASIDE_KEY, make, _ASIDE_TIMEOUT, lane="aside")
    for item in items:
        item.setup = lambda: None  # its fixtures are set up in the other process
        item.runtest = functools.partial(_aside_outcome, item, make)


def _aside_outcome(item, make: Make) -> None:
    import pytest

    done = result(_ASIDE_KEY, make, _ASIDE_TIMEOUT, lane="aside")
    path = done.tmp / "reports.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    reports = [r for r in map(json.loads, lines) if r["nodeid"] == item.nodeid]
    if not reports:
        last = json.loads(lines[-1]) if lines else None
        where = (
            f"; its last report: {last['nodeid']} {last['when']} {last['outcome']}, "
            f"{last['t'] - done.started:.0f} s after it started"
            if last and "t" in last
            else ""
        )
        pytest.fail(
            f"the aside pytest process (exit status {done.returncode}) reported nothing for "
            f"{item.nodeid}{where}:\n{(done.stdout + done.stderr)[-4000:]}"
            f"{_slowest(lines)}",
            pytrace=False,
        )
    for r in reports:
        if r["outcome"] == "failed":
            pytest.fail(f"{r['when']} failed in the aside process:\n{r['text']}", pytrace=False)
    for r in reports:
        if r["outcome"] == "skipped":
            pytest.skip(r["text"])


def aside_done() -> Done | None:
    """The aside process, if it ran in this session and has finished."""
    job = _JOBS.get(_ASIDE_KEY)
    return job.done if job is not None and job.finished.is_set() else None


def write_aside_report(report) -> None:
    """In the aside process: append ``report`` (a TestReport) for the first process."""
    if report.skipped and isinstance(report.longrepr, tuple):
        text = report.longrepr[2]
    else:
        text = report.longreprtext
        for name, content in report.sections if report.failed else ():
            if "log" not in name:  # its stdout and stderr (torch's debug log is long)
                text += f"\n----- {name} -----\n{content[-4000:]}"
    row = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome, "text": text}
    row.update(duration=report.duration, t=time.time())
    with open(os.environ[ASIDE_REPORTS], "a") as f:
        f.write(json.dumps(row) + "\n")


_SAID_SLOWEST: list[bool] = []


def _slowest(lines: Sequence[str], n: int = 12) -> str:
    """Where the aside process's time went, from its reports (a run killed at its limit prints
    no ``--durations``): seconds per file, then the slowest tests."""
    rows = [json.loads(line) for line in lines]
    if not rows or _SAID_SLOWEST:  # once: every test the process did not reach fails alike
        return ""
    _SAID_SLOWEST.append(True)
    files: dict[str, float] = {}
    for r in rows:
        key = r["nodeid"].split("::")[0]
        files[key] = files.get(key, 0.0) + r.get("duration", 0.0)
    top = sorted(rows, key=lambda r: -r.get("duration", 0.0))[:n]
    out = ["", "aside seconds per file:"]
    out += [f"  {t:8.1f} {f}" for f, t in sorted(files.items(), key=lambda kv: -kv[1])]
    out += ["slowest:"] + [f"  {r['duration']:8.1f} {r['when']} {r['nodeid']}" for r in top]
    return "\n".join(out)
