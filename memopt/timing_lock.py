"""One process at a time measures on a host: the device rates and the graph's kernel times.

memopt prices a plan with times it measures on the device (:func:`memopt.planner.costs.calibrate`,
:mod:`memopt.kernel_times`) and caches them in its cache dir. Processes that start together
on one host (a benchmark's variants, a sweep's jobs, two trainings on one GPU) used to measure
side by side: each one's kernels then ran beside the other's, each cached what it got, and each
planned with its own prices. On an H200 two processes planning Mistral at the same budget
priced its unplanned step at 84.50 and 98.65 ms, and made different plans (forty-second
session, docs/zoo.md).

So a measurement holds an exclusive lock on a file in the cache dir (:func:`held`), and reads
the cache again once it has the lock: what another process measured meanwhile is taken as is,
not measured again, and every process sharing the cache dir plans with the same times. The
lock covers measuring only; nothing that waits on another process (a collective, the process
group's store) runs under it. A process waits at most :data:`WAIT_S` and then measures without
it (said once). Where the lock file cannot be made (a read-only dir, no ``fcntl``) it measures
without one, as before. The lock is re-entrant in its process: a measurement inside another
does not wait for itself.

What it does not stop: another process's training steps running beside a measurement.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

log = logging.getLogger("memopt")

#: The lock file's name in the cache dir.
NAME = ".timing.lock"
#: Seconds a process waits for another one's measurement before it measures anyway: above a
#: cold calibration plus a large graph's kernels (tens of seconds on an H200), and the
#: ``compiled`` timing's 120 s of compiles (:data:`memopt.kernel_times.COMPILED_BUDGET_S`).
WAIT_S = 600.0
#: Seconds between two tries of a lock another process holds.
POLL_S = 0.05

_here = threading.RLock()  # the threads of this process, one at a time
_depth = [0]  # how deep this process is inside held() (the file lock is taken once)
_said: set[str] = set()


def lock_path(cache_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(cache_dir), NAME)


@contextlib.contextmanager
def held(cache_dir: str | os.PathLike[str] | None, what: str) -> Iterator[float]:
    """Hold the measuring lock of ``cache_dir`` (None: no lock); yields the seconds waited
    for it. ``what`` names the measurement in the log."""
    with _here:
        outer = not _depth[0] and cache_dir is not None
        fd, waited = _acquire(lock_path(cache_dir), what) if outer else (None, 0.0)
        _depth[0] += 1
        try:
            yield waited
        finally:
            _depth[0] -= 1
            if fd is not None:
                _release(fd)


def _acquire(path: str, what: str) -> tuple[int | None, float]:
    """The locked file's descriptor (None: measure without the lock) and the seconds waited."""
    try:
        import fcntl
    except ImportError:  # not a POSIX host
        return None, 0.0
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        _once(f"cannot open {path} ({e}); measuring without it")
        return None, 0.0
    t0 = time.perf_counter()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = time.perf_counter() - t0
            if told:
                log.info(
                    "memopt: %s: waited %.1f s for another process's measurement", what, waited
                )
            return fd, waited
        except BlockingIOError:
            pass
        except OSError as e:  # a file system without locks
            os.close(fd)
            _once(f"cannot lock {path} ({e}); measuring without it")
            return None, 0.0
        waited = time.perf_counter() - t0
        if waited >= WAIT_S:
            os.close(fd)
            _once(
                f"another process has measured on this host for {WAIT_S:.0f} s ({path}); "
                f"{what} is measured beside it (its times may be slower than alone)"
            )
            return None, waited
        if not told:
            told = True
            log.info("memopt: %s: another process is measuring on this host; waiting", what)
        time.sleep(POLL_S)


def _release(fd: int) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _once(text: str) -> None:
    if text not in _said:
        _said.add(text)
        log.warning("memopt timing lock: %s", text)
