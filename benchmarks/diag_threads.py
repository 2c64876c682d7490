"""Every thread of this process: CPU time and time spent waiting for a CPU (Linux).

``snapshot()`` reads ``/proc/self/task/<tid>/schedstat`` (nanoseconds on a CPU, nanoseconds
runnable but waiting in a run queue, time slices) and ``comm`` (the thread's name) for every
thread; ``per_step(before, after, steps)`` turns two snapshots into per-step milliseconds
per thread name (threads of the same name summed: an OpenMP team, a pool). A launch thread
that waits in the run queue issues its kernels late, which no profile of the GPU shows.
``host_load()`` is the host's run queue as ``/proc/loadavg`` has it. Used by
``benchmarks/param_peers.py`` (``threads`` in its JSON)."""

from __future__ import annotations

import os
import re

_TASKS = "/proc/self/task"


def snapshot() -> dict[int, tuple[str, int, int, int]]:
    """tid -> (name, ns on a CPU, ns waiting for one, time slices); {} off Linux."""
    out = {}
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/schedstat") as f:
                run, wait, slices = (int(v) for v in f.read().split()[:3])
            with open(f"{_TASKS}/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError):
            continue  # the thread ended between listdir and the read
        out[int(tid)] = (name, run, wait, slices)
    return out


def _family(name: str, tid: int, main: int) -> str:
    """A thread's group: the main thread, else its name without a trailing pool number."""
    if tid == main:
        return "main"
    return re.sub(r"[-_]?\d+$", "", name) or name


def per_step(before: dict, after: dict, steps: int) -> list[dict]:
    """Per thread group (largest CPU time first): threads, CPU ms and run-queue ms per step,
    and the largest single thread's CPU ms per step."""
    main = os.getpid()
    groups: dict[str, dict] = {}
    for tid, (name, run, wait, _) in after.items():
        _, run0, wait0, _ = before.get(tid, (name, 0, 0, 0))
        g = groups.setdefault(
            _family(name, tid, main),
            {"threads": 0, "cpu_ms": 0.0, "runq_ms": 0.0, "top_cpu_ms": 0.0},
        )
        cpu = (run - run0) / 1e6 / steps
        g["threads"] += 1
        g["cpu_ms"] += cpu
        g["runq_ms"] += (wait - wait0) / 1e6 / steps
        g["top_cpu_ms"] = max(g["top_cpu_ms"], cpu)
    rows = [{"group": k, **{n: round(v, 2) for n, v in g.items()}} for k, g in groups.items()]
    return sorted(rows, key=lambda r: -r["cpu_ms"])


def host_load() -> dict:
    """The host's load averages and its runnable / total tasks now."""
    try:
        with open("/proc/loadavg") as f:
            parts = f.read().split()
    except OSError:
        return {}
    running, total = parts[3].split("/")
    return {"load1": float(parts[0]), "runnable": int(running), "tasks": int(total)}
