"""The graph's own compute kernels, timed on the device.

The roofline (:mod:`memopt.planner.costs`) prices a matmul at the rate of one large square
matmul, an attention at that rate over its full ``4·b·h·s²·d`` FLOPs, a convolution by its
multiply-adds at that rate too, and a reduction by its bytes at the HBM copy rate. Real
kernels miss those numbers by a shape-dependent factor (a thin matmul, a causal attention that
skips half its blocks, a backward kernel, a 3x3 convolution, a row reduction over short rows),
and a recompute is chosen or refused on exactly these costs. So every matmul, attention,
convolution and reduction (:func:`memopt.facts.is_reduction`: sum, mean, amax, var_mean, ...,
a norm or softmax that reaches the graph whole) of a graph (forward, backward and the joint
graph the recompute subgraphs come from) is timed once on the device with real tensors of its
shapes, strides and dtypes, and the time is cached per device, torch version and signature
(``kernels-<device>-torch<v>.json`` next to the device rates).

What a reduction's time stands for: Inductor fuses a reduction with the pointwise ops around
it, and a recomputed one into the backward kernel that needs it, so the op alone is not the
kernel that runs. But the fused kernel still walks the same rows; what that costs is set by
the row length, the number of rows and the passes (``var_mean``), not by where the input comes
from. The time of the op alone, reading its input from memory, is therefore taken as what the
reduction adds to whatever kernel runs it, and used as is, like a matmul's. It is not turned
into an effective bandwidth over the op's bytes: by the fusion rules
(:mod:`memopt.memory_rules`) a reduction whose input is a fused producer (every bf16 norm
reduces an upcast) moves only its small output, and that rate would price it back near the
roofline that missed. What this over-prices: the fused producers keep their roofline for
reading the input the measurement read too (at most one read of it at the HBM rate), and
reductions that Inductor does in one pass over the same rows are priced one by one.
Pointwise ops stay on the memory roofline: fused, their cost is the bytes the kernel moves.

A kernel that cannot be run alone (an op whose random inputs it rejects, no memory left under
a cap) keeps its roofline time; a measurement is never required for a plan.

At world size > 1 the ranks must plan with the same times: rank 0 measures (and writes its
cache) and publishes every time a graph needs in the process group's key-value store (the
rendezvous store, on every host); the other ranks wait for those keys
(:data:`LEADER_WAIT_S`) and use rank 0's times, whatever their own cache dir holds (each
rank may have a private one). No collective runs inside a compile.
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping

import sympy
import torch
import torch.fx

from memopt import facts, timing_lock
from memopt import meta_keys as mk
from memopt.config import write_atomic

log = logging.getLogger("memopt")

#: Op classes (:func:`memopt.facts.op_class`) whose kernels are timed, besides reductions.
TIMED = frozenset({"matmul", "attention", "convolution"})
#: Version of the cache file and of the timing code; a change re-measures. 2: an input of
#: stride 0 (expanded) is made runnable (version 1 wrote its kernels as not runnable alone);
#: 3: the timed runs are queued behind a GPU sleep (:data:`TIMING_ENV`).
VERSION = 3
#: Timed runs per kernel after two warm-up runs; the fastest counts (another process's
#: kernels on the same GPU only ever add time).
REPEATS = 10
#: Seconds a rank waits for its host's first rank to time the kernels it needs.
LEADER_WAIT_S = 120.0
#: A time outside this range is a failed measurement, not a kernel: seconds.
PLAUSIBLE_S = (1e-7, 30.0)
#: How a kernel's timed runs are issued (thirty-ninth session): queued behind a GPU sleep by
#: default, so each event pair spans the kernel alone. Issued one by one
#: (``MEMOPT_KERNEL_TIMING=issued``, the default until then), a kernel shorter than the host's
#: eager dispatch of it is timed at that dispatch: on an H200 that priced ConvNeXt's 111
#: matmuls at 8.50 ms a step against 3.69 ms of matmul kernels profiled, its reductions at
#: 15.02 ms against 2.85 ms and its whole step at 34.5 ms against 16.5 ms; queued, the same
#: code priced them at 3.75, 5.83 and 17.9 ms (docs/zoo.md, thirty-ninth session).
#: ``compiled`` (an experiment, not yet measured on the GPU) queues them too and times each
#: reduction as Inductor compiles it alone (:func:`memopt._torch_compat.kernels.inductor_op`),
#: not aten's eager kernel: queued, ConvNeXt's reductions were still priced at 2.0× the
#: profiled reduction kernels. Each way has its own cache file.
TIMING_ENV = "MEMOPT_KERNEL_TIMING"
TIMING_MODES = ("queued", "issued", "compiled")
#: GPU clock cycles per second the sleep is sized with (above an H200's 1.98 GHz boost, so the
#: sleep never ends early), and its margin over the host's measured time to queue the runs.
SLEEP_CYCLES_PER_S, SLEEP_MARGIN, SLEEP_MAX_S = 2.5e9, 2.0, 0.05
_SAID: set[str] = set()  # unknown MEMOPT_KERNEL_TIMING values already warned about
#: ``compiled`` timing: the seconds of Inductor compiles a process spends on reductions; past
#: them each further reduction is timed as aten's kernel (said once). Set for a device call
#: of a few minutes: a script that compiled every signature alone ran out of its 150 s a
#: model on an H200 (thirty-ninth session); not fitted to any model.
COMPILED_BUDGET_S = 120.0
_compiled_s = [0.0]  # spent so far in this process


def timing_mode() -> str:
    """How kernels are timed (:data:`TIMING_ENV`, one of :data:`TIMING_MODES`; unset is
    ``queued``, another value is said once and timed queued)."""
    v = os.environ.get(TIMING_ENV, "").strip().lower() or "queued"
    if v not in TIMING_MODES:
        if v not in _SAID:
            _SAID.add(v)
            log.warning(
                "memopt: %s=%r is not one of %s: kernels are timed queued",
                TIMING_ENV,
                v,
                ", ".join(TIMING_MODES),
            )
        return "queued"
    return v


def queued_timing() -> bool:
    """Whether kernels are timed queued behind a GPU sleep (all but ``issued``)."""
    return timing_mode() != "issued"


Value = Callable[[sympy.Expr], int | None]


# --------------------------------------------------------------------------- signatures


def timed(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a compute kernel whose time is measured: a matmul, attention,
    convolution or reduction (not the pointwise ops of a decomposed norm or softmax)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    return facts.op_class(node) in TIMED or facts.is_reduction(node)


def _dims(xs: Iterable[object], value: Value) -> list[int] | None:
    out = []
    for x in xs:
        v = facts.dim_value(x, value)
        if v is None:
            return None
        out.append(v)
    return out


def _describe(arg: object, value: Value) -> str | None:
    """One argument of a signature: a tensor's dtype, sizes and strides, a value's repr."""
    if isinstance(arg, torch.fx.Node):
        v = arg.meta.get(mk.TORCH_VAL)
        if isinstance(v, torch.Tensor):
            shape, stride = _dims(v.shape, value), _dims(v.stride(), value)
            if shape is None or stride is None:
                return None
            dt = str(v.dtype).removeprefix("torch.")
            return f"{dt}{shape}s{stride}".replace(" ", "") + (
                "@cpu" if v.device.type == "cpu" else ""
            )
        if isinstance(v, torch.SymInt | int):
            d = facts.dim_value(v, value)
            return None if d is None else str(d)
        return None  # a node of no tensor or int value (a tuple): not timed
    if isinstance(arg, list | tuple):
        parts = [_describe(a, value) for a in arg]
        return None if None in parts else "[" + ",".join(parts) + "]"  # type: ignore[arg-type]
    if isinstance(arg, torch.SymInt | torch.SymFloat | torch.SymBool):
        return None
    if isinstance(arg, torch.dtype | torch.device | torch.layout | torch.memory_format):
        return str(arg)
    return repr(arg)


def signature(node: torch.fx.Node, value: Value) -> str | None:
    """The kernel's identity: op overload, every argument (tensors by dtype, sizes and
    strides at the compile's sizes). None: not a timed kernel, or a size that cannot be
    evaluated."""
    if not timed(node):
        return None
    args = [_describe(a, value) for a in node.args]
    kwargs = {k: _describe(v, value) for k, v in sorted(node.kwargs.items())}
    if None in args or None in kwargs.values():
        return None
    args += [f"{k}={v}" for k, v in kwargs.items()]
    return f"{node.target}({','.join(args)})"  # type: ignore[arg-type]


def signatures(graphs: Iterable[torch.fx.GraphModule], value: Value) -> dict[str, torch.fx.Node]:
    """Every timed kernel of ``graphs`` by signature (the first node of each)."""
    out: dict[str, torch.fx.Node] = {}
    for gm in graphs:
        for n in gm.graph.nodes:
            s = signature(n, value)
            if s is not None:
                out.setdefault(s, n)
    return out


# --------------------------------------------------------------------------- measurement


def _span(shape: list[int], stride: list[int]) -> int:
    """Elements of the storage a tensor of these sizes and strides spans (0 when empty)."""
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0


def _real(v: torch.Tensor, device: torch.device, value: Value) -> torch.Tensor:
    """A real tensor of ``v``'s sizes, strides and dtype (random floats, zero ints) on
    ``device`` (or the CPU where ``v`` lives there: an RNG seed argument)."""
    shape, stride = _dims(v.shape, value), _dims(v.stride(), value)
    where = torch.device("cpu") if v.device.type == "cpu" else device
    # the storage it spans is filled, then viewed: an expanded tensor (stride 0, such as a
    # loss's gradient) cannot be written element by element
    base = torch.empty(_span(shape, stride), dtype=v.dtype, device=where)
    if v.dtype.is_floating_point or v.dtype.is_complex:
        base.normal_()
    else:
        base.zero_()
    return base.as_strided(shape, stride)  # type: ignore[arg-type]


def device_bytes(node: torch.fx.Node, value: Value, device: torch.device) -> int:
    """Bytes timing ``node`` allocates on ``device``: its tensor arguments as :func:`_real`
    makes them (a CPU tensor, an RNG seed, stays on the CPU) and its outputs (each storage
    spanned once; unknown sizes count 0). Not counted: scratch a kernel allocates inside (a
    cuDNN workspace, an attention backward's accumulators)."""
    total = 0

    def add(v: object) -> None:
        nonlocal total
        if isinstance(v, torch.Tensor) and (v.device.type != "cpu" or device.type == "cpu"):
            shape, stride = _dims(v.shape, value), _dims(v.stride(), value)
            if shape is not None and stride is not None:
                total += _span(shape, stride) * v.itemsize
        elif isinstance(v, list | tuple):
            for x in v:
                add(x)

    for a in [*node.args, *node.kwargs.values()]:
        for x in a if isinstance(a, list | tuple) else (a,):
            if isinstance(x, torch.fx.Node):
                add(x.meta.get(mk.TORCH_VAL))
    add(node.meta.get(mk.TORCH_VAL))
    return total


def real_args(node: torch.fx.Node, device: torch.device, value: Value) -> tuple[tuple, dict]:
    """``node``'s arguments with every tensor a real one and every SymInt its value."""

    def one(a: object) -> object:
        if isinstance(a, torch.fx.Node):
            v = a.meta.get(mk.TORCH_VAL)
            if isinstance(v, torch.Tensor):
                return _real(v, device, value)
            return facts.dim_value(v, value)
        if isinstance(a, list | tuple):
            return type(a)(one(x) for x in a)
        return a

    return tuple(one(a) for a in node.args), {k: one(v) for k, v in node.kwargs.items()}


class NoMemory(Exception):
    """The kernel's inputs did not fit (a capped device): worth timing again later."""


def time_kernel(node: torch.fx.Node, device: torch.device, value: Value) -> float | None:
    """Seconds one run of ``node``'s kernel takes on ``device`` (the fastest of
    :data:`REPEATS`), or None when it cannot run alone; :class:`NoMemory` when its inputs do
    not fit now."""
    from memopt import _torch_compat as compat

    is_cuda = device.type == "cuda"
    try:
        with compat.real_tensors(), torch.no_grad():
            args, kwargs = real_args(node, device, value)
            run = _runner(node, args, kwargs)
            for _ in range(2):
                run()
            if not is_cuda:
                samples = []
                for _ in range(REPEATS):
                    t0 = time.perf_counter()
                    run()
                    samples.append(time.perf_counter() - t0)
                best = min(samples)
            else:
                t0 = time.perf_counter()
                run()
                issue_s = time.perf_counter() - t0  # the host's dispatch of one run
                torch.cuda.synchronize(device)
                if queued_timing():
                    ahead = min(SLEEP_MARGIN * (REPEATS * 3 * issue_s + 1e-4), SLEEP_MAX_S)
                    compat.gpu_sleep(ahead * SLEEP_CYCLES_PER_S)
                ev = [
                    (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                    for _ in range(REPEATS)
                ]
                for start, end in ev:
                    start.record()
                    run()
                    end.record()
                torch.cuda.synchronize(device)
                best = min(s.elapsed_time(e) for s, e in ev) / 1e3
    except torch.OutOfMemoryError as e:
        raise NoMemory(str(e)[:200]) from None
    except Exception as e:  # noqa: BLE001 - any failure keeps the roofline for this op
        log.debug("memopt kernel times: %s not timed (%s: %s)", node.target, type(e).__name__, e)
        return None
    lo, hi = PLAUSIBLE_S
    return best if lo <= best <= hi else None


def _runner(node: torch.fx.Node, args: tuple, kwargs: dict) -> Callable[[], object]:
    """One run of ``node``'s kernel: aten's eager op, or (``compiled`` timing, a reduction)
    the kernel Inductor compiles for it alone. A reduction Inductor cannot compile alone is
    timed as aten's kernel."""
    fn = node.target
    if timing_mode() == "compiled" and facts.is_reduction(node):
        if _compiled_s[0] >= COMPILED_BUDGET_S:
            _note_once(
                f"the {COMPILED_BUDGET_S:.0f} s for compiling reductions alone are spent; "
                "further reductions are timed as aten's kernels"
            )
            return lambda: fn(*args, **kwargs)  # type: ignore[operator]
        from memopt._torch_compat.kernels import inductor_op

        t0 = time.perf_counter()
        try:
            return inductor_op(fn, args, kwargs)
        except Exception as e:  # noqa: BLE001 - aten's kernel still prices it
            log.debug("memopt kernel times: %s not compiled alone (%s)", fn, e)
        finally:
            _compiled_s[0] += time.perf_counter() - t0
    return lambda: fn(*args, **kwargs)  # type: ignore[operator]


# --------------------------------------------------------------------------- the cache


def cache_path(device: torch.device, where: str) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    mode = "" if timing_mode() == "queued" else f"-{timing_mode()}"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{name}-torch{torch.__version__}{mode}").strip("-")
    return os.path.join(where, f"kernels-{slug}.json")


def read_cache(path: str) -> dict[str, float | None]:
    """Signature -> seconds; None: the kernel cannot run alone (it keeps the roofline)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {}
    lo, hi = PLAUSIBLE_S
    out: dict[str, float | None] = {}
    for k, v in data.get("kernels", {}).items():
        if v is None:
            out[k] = None
        elif isinstance(v, int | float) and lo <= v <= hi:
            out[k] = float(v)
    return out


def write_cache(path: str, new: Mapping[str, float | None]) -> None:
    """Add ``new`` to the file (merged with what another process wrote meanwhile)."""
    merged = {**read_cache(path), **new}
    write_atomic(
        path, json.dumps({"version": VERSION, "kernels": merged}, indent=0, sort_keys=True)
    )


# --------------------------------------------------------------------------- a graph's table


def measure(
    graphs: Iterable[torch.fx.GraphModule],
    device: torch.device,
    value: Value,
    where: str,
    room: int | Callable[[], int] | None = None,
    deferred: dict[str, torch.fx.Node] | None = None,
) -> dict[str, float]:
    """Seconds per timed kernel of ``graphs`` (by signature): read from the cache under
    ``where``, the missing ones timed on ``device`` and added to it. Kernels that cannot run
    alone are left out (the roofline prices them). ``room``: the device bytes a timing may
    allocate (:func:`memopt.passes.plan_budget.measure_room`, or a function asked only when
    something is timed); a kernel needing more is left to the roofline here, as one that ran
    out of memory, and put in ``deferred`` (signature -> node), to be timed when there is room
    (:func:`measure_nodes`: between steps) or by a later process. At world size > 1 see the
    module docstring."""
    from memopt import ranks

    nodes = signatures(graphs, value)
    if not nodes:
        return {}
    follower = ranks.world_size() > 1 and ranks.rank() != 0 and ranks.store() is not None
    if follower:
        # after one wait in vain (rank 0 compiled without timing: a warm cache of its own),
        # later graphs take what is there without waiting again
        wait = 1.0 if _silent_leader else LEADER_WAIT_S
        came = ranks.from_store([_key(s) for s in nodes], wait)
        table = {s: came[_key(s)] for s in nodes if _key(s) in came}
        if len(table) < len(nodes):
            _mark_silent()
            _note_once(
                f"{len(nodes) - len(table)} kernel time(s) did not come from rank 0 in "
                f"{LEADER_WAIT_S:.0f} s; those use the roofline here (plans may differ between "
                "ranks)"
            )
        return {s: t for s in nodes if (t := table.get(s)) is not None}
    table = _cached_times(nodes, device, value, where, room, deferred)
    if ranks.world_size() > 1:  # rank 0: every time the graphs need, for the other ranks
        ranks.publish({_key(s): table.get(s) for s in nodes})
    return {s: t for s in nodes if (t := table.get(s)) is not None}


def measure_nodes(
    nodes: dict[str, torch.fx.Node],
    device: torch.device,
    value: Value,
    where: str,
    room: int | Callable[[], int] | None = None,
) -> dict[str, float]:
    """Time kernels left out for lack of room (``measure``'s ``deferred``) now: the cache's or
    a new time for each that fits ``room`` and runs alone. Those that still do not fit stay
    in ``nodes``; the others are removed from it."""
    still: dict[str, torch.fx.Node] = {}
    table = _cached_times(nodes, device, value, where, room, still)
    asked = list(nodes)
    for s in asked:
        if s not in still:
            del nodes[s]
    return {s: t for s in asked if (t := table.get(s)) is not None}


def _cached_times(
    nodes: Mapping[str, torch.fx.Node],
    device: torch.device,
    value: Value,
    where: str,
    room: int | Callable[[], int] | None,
    deferred: dict[str, torch.fx.Node] | None,
) -> dict[str, float | None]:
    """The cache's times under ``where``, with the ``nodes`` it lacks timed and added, under
    the host's measuring lock (:mod:`memopt.timing_lock`: one process times at a time, and
    what another timed meanwhile is read, not timed again)."""
    path = cache_path(device, where)
    table = read_cache(path)
    if all(s in table for s in nodes):
        return table
    with timing_lock.held(where, "kernel times"):
        table.update(read_cache(path))  # what another process timed while this one waited
        missing = {s: n for s, n in nodes.items() if s not in table}
        if missing:
            table.update(_time_missing(missing, device, value, path, room, len(nodes), deferred))
    return table


def _time_missing(
    missing: Mapping[str, torch.fx.Node],
    device: torch.device,
    value: Value,
    path: str,
    room: int | Callable[[], int] | None,
    n_nodes: int,
    deferred: dict[str, torch.fx.Node] | None,
) -> dict[str, float | None]:
    """Time ``missing`` on ``device`` under ``room``, write what ran (or cannot run alone) to
    the cache at ``path``, and put those that did not fit in ``deferred``."""
    got: dict[str, float | None] = {}
    no_memory: set[str] = set()
    if callable(room):
        room = room()
    if room is not None:  # a matmul on a stream without one allocates a cuBLAS workspace
        from memopt._torch_compat.allocator import cublas_workspace_bytes

        room -= cublas_workspace_bytes(device)
    for s, n in missing.items():
        try:
            if room is not None and device_bytes(n, value, device) > room:
                raise NoMemory(f"needs more than the {room} bytes of room")
            got[s] = time_kernel(n, device, value)
        except NoMemory:
            got[s] = None  # the roofline for now; timed again when there is room
            no_memory.add(s)
            if deferred is not None:
                deferred[s] = n
    # what cannot run alone is written as such (None); what ran out of memory under a cap
    # is not written (timed when there is room, or by a later process)
    write_cache(path, {s: t for s, t in got.items() if s not in no_memory})
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the inputs made for timing go back to the device
    log.info(
        "memopt kernel times: %d kernel(s) timed on %s, %d from the cache, %d not runnable "
        "alone (roofline), %d without room for now (roofline)",
        sum(t is not None for t in got.values()),
        device,
        n_nodes - len(missing),
        sum(t is None for s, t in got.items() if s not in no_memory),
        len(no_memory),
    )
    return {s: t for s, t in got.items() if s not in no_memory}


def _key(signature: str) -> str:
    return f"memopt/kernel-times/v{VERSION}/{hashlib.sha1(signature.encode()).hexdigest()}"


_silent_leader = False


def _mark_silent() -> None:
    global _silent_leader
    _silent_leader = True


_noted: set[str] = set()


def _note_once(text: str) -> None:
    if text not in _noted:
        _noted.add(text)
        log.warning("memopt kernel times: %s", text)


def lookup(table: Mapping[str, float], value: Value) -> Callable[[torch.fx.Node], float | None]:
    """``node -> measured seconds`` (None: not timed) over ``table``."""

    def seconds(node: torch.fx.Node) -> float | None:
        if not table:
            return None
        s = signature(node, value)
        return None if s is None else table.get(s)

    return seconds
