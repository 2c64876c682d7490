"""How many threads the host AdamW uses, chosen from the host and set for one thread only.

torch's CPU kernels run OpenMP teams of ``torch.get_num_threads()``. ``torch.set_num_threads``
also changes the process-wide default that every thread starting later picks up; the update
worker instead sets the team size of its own thread (``omp_set_num_threads`` of the OpenMP
runtime torch loaded, a per-thread setting), after torch's lazy per-thread initialisation,
which would otherwise overwrite it at the first parallel op.
"""

from __future__ import annotations

import ctypes
import os

import torch

_OMP_NAMES = ("libgomp", "libiomp", "libomp")


def host_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _omp_libraries() -> list[ctypes.CDLL]:
    """The OpenMP runtimes mapped into this process (torch's among them)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if any(n in ln for n in _OMP_NAMES)}
    except OSError:
        return []
    libs = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.omp_set_num_threads.argtypes = [ctypes.c_int]
            libs.append(lib)
        except (OSError, AttributeError):
            continue
    return libs


def set_thread_team(n: int | None) -> int:
    """Make this thread's torch CPU ops use ``n`` threads (None: leave torch's count).

    Returns the count now in effect for this thread. Other threads keep theirs: the setting is
    the calling thread's in every OpenMP runtime mapped (a process may map several, and which
    one torch's kernels use is not visible); only when none takes effect does it fall back to
    ``torch.set_num_threads``, which also changes the default of threads started later.
    """
    torch.get_num_threads()  # torch's per-thread lazy init runs now, not after our setting
    if n is None or n == torch.get_num_threads():
        return torch.get_num_threads()
    if n < 1:
        raise ValueError(f"threads={n} must be >= 1")
    for lib in _omp_libraries():
        lib.omp_set_num_threads(n)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def check_nice(nice: int) -> int:
    """``nice`` for :func:`set_thread_nice`: an int in 0..19 (raising priority needs root)."""
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
        raise ValueError(f"nice={nice!r} must be an int in 0..19 (0: the default priority)")
    if nice and not hasattr(os, "setpriority"):
        raise ValueError(f"nice={nice} needs os.setpriority (Linux); this platform lacks it")
    return nice


def name_thread(name: str) -> None:
    """Give this OS thread ``name`` (Linux ``comm``, 15 bytes; inherited by the threads it
    starts): top, py-spy and /proc then tell the update worker and its team apart."""
    try:
        with open("/proc/thread-self/comm", "w") as f:
            f.write(name[:15])
    except OSError:
        pass


def set_thread_nice(nice: int) -> None:
    """Lower this thread's scheduling priority to ``nice`` (Linux: per thread, and inherited
    by the threads it starts later, such as its OpenMP team). 0 leaves it."""
    if nice:
        import threading

        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def local_ranks() -> int:
    """Processes of this job on this host (torchrun's ``LOCAL_WORLD_SIZE``; 1 without it)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def resolve_threads(threads: int | str | None) -> int | None:
    """``None``: torch's count (torchrun sets it to 1 when it starts several processes);
    ``"auto"``: this process's share of the host's cores (its cores over the job's processes
    on this host) less one, which is left to the thread that drives the GPU; an int: that
    many."""
    if threads is None or isinstance(threads, int) and not isinstance(threads, bool):
        return threads
    if threads == "auto":
        return max(1, host_cores() // local_ranks() - 1)
    raise ValueError(f"threads={threads!r} must be None, 'auto' or an int >= 1")
