"""The layers of a step whose layers are compiled regions, and offloading them: plain data (no
torch, no FX), read by the step planner (:mod:`memopt.step`) and the runtime
(:mod:`memopt.offload.step_offload`).

A layer is a list of run positions (a block split by a graph break is two runs). Offloading
the first ``k`` layers follows ``default_sync``: layer ``i``'s saved tensors go to the host
after its forward and come back, paced, from the backward of layer ``n-k+i-1`` (never later
than one layer ahead) up to their first use. While they are on the host they are not held on
the device: :func:`offload_choice` says, per run, which offloaded runs are away while it runs,
and :func:`offload_times` what the step waits for: one transfer stream carries the copies to
the host (not waited on by compute, but the copy-backs queue behind them) and back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memopt.plan import Strategy


def layer_runs(keys: Sequence[object]) -> list[list[int]]:
    """The layers of a step whose layers are compiled regions: the longest stretch of runs
    that repeats one pattern of graphs (``keys``: one graph key per run, in forward order),
    as lists of run positions, one list per layer. ``[]`` when nothing repeats.

    ``(emb, L, L, L, head)`` gives ``[[1], [2], [3]]``; a block split by a graph break into
    two graphs, ``(a, b, c, b, c, b, d)``, gives ``[[1, 2], [3, 4]]``."""
    n = len(keys)
    best: tuple[int, int, int, int] | None = None  # (-coverage, period, start, repeats)
    for p in range(1, n // 2 + 1):
        for s in range(n - 2 * p + 1):
            pat = list(keys[s : s + p])
            r = 1
            while s + (r + 1) * p <= n and list(keys[s + r * p : s + (r + 1) * p]) == pat:
                r += 1
            if r >= 2:
                cand = (-(r * p), p, s, r)
                if best is None or cand < best:
                    best = cand
    if best is None:
        return []
    _, p, s, r = best
    return [list(range(s + i * p, s + (i + 1) * p)) for i in range(r)]


def layers_read(reads: Sequence[frozenset[int]]) -> list[list[int]]:
    """The step's layers from the model layers whose weights each run reads (``reads``: per
    run in forward order, the indices of the model's layers, ``model.layers.i``, among its
    arguments' storages), where they map cleanly; ``[]`` otherwise.

    Each run reads at most one layer, each layer's runs come before the next layer's, and a
    run that reads none lies between two runs of one layer or at the end of a layer that
    another follows (a block's tail after its break). A layer whose routing varies (DBRX's
    experts: a graph per expert hit, the first iteration a graph of its own) keeps its runs
    together though the graphs do not repeat one pattern, which :func:`layer_runs` needs."""
    owner = []
    for r in reads:
        if len(r) > 1:
            return []  # a run spanning two layers: no clean cut between them
        owner.append(next(iter(r)) if r else None)
    order = [o for o in owner if o is not None]
    if len(set(order)) < 2 or any(a > b for a, b in zip(order, order[1:])):
        return []  # one layer, or a layer after a later one (weights shared across depths)
    layers: list[list[int]] = []
    last = None
    for j, o in enumerate(owner):
        if o is None:
            continue
        if o != last:
            layers.append([])
            last = o
        elif layers[-1][-1] != j - 1:
            layers[-1].extend(range(layers[-1][-1] + 1, j))  # runs inside the layer
        layers[-1].append(j)
    for a, b in zip(layers, layers[1:]):
        a.extend(range(a[-1] + 1, b[0]))  # a layer's tail up to the next layer's first run
    return layers


def step_layers(
    keys: Sequence[object], reads: Sequence[frozenset[int]] | None = None
) -> list[list[int]]:
    """The step's layers: from the weights the runs read where they map cleanly
    (:func:`layers_read`), else the repeated pattern of graphs (:func:`layer_runs`)."""
    if reads is not None and len(reads) == len(keys):
        layers = layers_read(reads)
        if layers:
            return layers
    return layer_runs(keys)


def reload_schedule(layers: Sequence[Sequence[int]], k: int) -> dict[int, list[int]]:
    """When the first ``k`` of ``layers`` (lists of run positions, forward order) come back,
    as :func:`memopt.offload.sync.default_sync` does inside one graph: layer ``i``'s copy-back
    starts when the backward of layer ``n-k+i`` has ended (layer ``n-k+i-1``'s begins), so
    at most ``n-k`` layers' tensors are on the device at any layer boundary and each copy has
    the backward of ``n-k-1`` layers to hide behind. Returns trigger run -> runs to reload."""
    n = len(layers)
    out: dict[int, list[int]] = {}
    for i in range(k):
        t = max(n - k + i - 1, i + 1)
        out.setdefault(max(layers[t]), []).extend(layers[i])
    return out


@dataclass(frozen=True)
class OffloadChoice:
    """Offloading the first ``k`` layers of the step."""

    k: int
    runs: tuple[int, ...]
    """The offloaded run positions."""
    reload_at: Mapping[int, tuple[int, ...]]
    """Run whose backward start begins the copy-back -> the runs it brings back."""
    away: Mapping[int, frozenset[int]] = field(default_factory=dict)
    """Run -> the offloaded runs whose saved tensors are on the host while it runs (forward
    and backward: the copy-back has not begun when its backward runs)."""


def offload_choice(
    layers: Sequence[Sequence[int]],
    k: int,
    n_runs: int,
    ready: Mapping[int, int] | None = None,
) -> OffloadChoice:
    """The first ``k`` of ``layers`` offloaded, in a step of ``n_runs`` runs. ``ready``: per
    offloaded run, the first run whose forward begins after its copy to the host has ended
    (its device memory is freed only then; :func:`offload_times`); default: the next run."""
    reload = reload_schedule(layers, k)
    trigger = {j: t for t, js in reload.items() for j in js}
    runs = tuple(j for layer in layers[:k] for j in layer)
    first = {j: max(j + 1, (ready or {}).get(j, j + 1)) for j in runs}
    away = {
        i: frozenset(j for j in runs if i >= first[j] and i > trigger[j]) for i in range(n_runs)
    }
    return OffloadChoice(
        k=k,
        runs=runs,
        reload_at={t: tuple(js) for t, js in reload.items()},
        away={i: a for i, a in away.items() if a},
    )


@dataclass(frozen=True)
class StepTiming:
    """Predicted seconds per run (forward order) and the copy rates, for the offload cost."""

    bwd_s: Sequence[float]
    h2d_bytes_per_s: float
    cpu_s_per_run: float = 0.0
    """Forward-thread CPU time an offloaded run adds (packing its saved tensors, issuing their
    copies), charged in full: the forward of a step whose layers are compiled regions is
    host-bound (FSDP2's per-layer hooks; docs/benchmarks.md), so its CPU time delays the GPU
    1:1, while the backward's share runs ahead of long kernels and is not charged."""
    fwd_s: Sequence[float] = ()
    """Forward seconds per run (empty: the copies to the host are not timed)."""
    d2h_bytes_per_s: float = 0.0
    cpu_s_per_tensor: float = 0.0
    """Forward-thread CPU time per tensor an offloaded run copies, besides
    :attr:`cpu_s_per_run`, charged as it is."""
    tensors: Mapping[int, frozenset[str]] = field(default_factory=dict)
    """Per run position, the saved tensors (candidate names) large enough to be copied: a
    plan's count is those it keeps (:func:`kept_tensors`)."""


def kept_tensors(decisions: Mapping[str, Any], names: frozenset[str]) -> int:
    """Of ``names``, the saved tensors a plan (its non-keep ``decisions`` by candidate name)
    leaves saved: not recomputed, not offloaded inside its region (a compromise keeps one)."""
    gone = (Strategy.RECOMPUTE, Strategy.OFFLOAD)  # an IntEnum: plain ints compare equal
    return sum(1 for n in names if decisions.get(n) not in gone)


def offload_times(
    choice: OffloadChoice,
    moved: Mapping[int, int],
    timing: StepTiming,
    copies: Mapping[int, int] | None = None,
) -> tuple[float, dict[int, int]]:
    """Predicted seconds the step loses to ``choice``, and per offloaded run the first run
    whose forward begins after its copy to the host has ended. ``moved``: bytes each offloaded
    run copies; ``copies``: how many tensors (default: every one of :attr:`StepTiming.tensors`).

    One transfer stream carries both directions, as the runtime does: the copies to the host
    queue from the end of each offloaded run's forward (compute never waits for them, but the
    copy-backs queue behind them); in the backward each copy-back starts at its trigger run's
    backward start and the backward waits at the first use of a run whose copy has not ended
    (a wait delays everything after it). Plus, per offloaded run, its CPU time."""
    n = len(timing.bwd_s)
    fwd = list(timing.fwd_s) or [0.0] * n
    fwd_start, t = [0.0] * n, 0.0
    for i in range(n):
        fwd_start[i], t = t, t + fwd[i]
    free, ready = 0.0, {}
    for j in sorted(choice.runs):
        if timing.d2h_bytes_per_s > 0 and timing.fwd_s:
            free = max(free, fwd_start[j] + fwd[j]) + moved.get(j, 0) / timing.d2h_bytes_per_s
        ready[j] = next((i for i in range(j + 1, n) if fwd_start[i] >= free), n)
    back_done: dict[int, float] = {}
    now, wait_s = t, 0.0  # the backward begins when the forward ends
    for i in range(n - 1, -1, -1):  # run i's backward begins: issue, then wait
        for j in sorted(choice.reload_at.get(i, ()), reverse=True):  # first-use order
            free = max(free, now) + moved.get(j, 0) / timing.h2d_bytes_per_s
            back_done[j] = free
        if back_done.get(i, 0.0) > now:  # the first use of an offloaded run
            wait_s += back_done[i] - now
            now = back_done[i]
        now += timing.bwd_s[i]
    count = {j: len(timing.tensors.get(j, ())) for j in choice.runs} | dict(copies or {})
    cpu_s = sum(timing.cpu_s_per_run + timing.cpu_s_per_tensor * count[j] for j in choice.runs)
    return wait_s + cpu_s, ready


def offload_overhead(
    choice: OffloadChoice,
    moved: Mapping[int, int],
    timing: StepTiming,
    copies: Mapping[int, int] | None = None,
) -> float:
    """Predicted seconds the step loses to ``choice`` (:func:`offload_times`)."""
    return offload_times(choice, moved, timing, copies)[0]


def step_offload_timing(
    sequence: Sequence[int],
    keys: Sequence[object],
    problems: Mapping[int, Any],
    reads: Sequence[frozenset[int]] | None = None,
    min_bytes: int = 0,
) -> tuple[list[list[int]], StepTiming | None]:
    """The layers of the step ``sequence`` (``keys``: each run's graph key; ``reads``: the
    model layers each run read, :func:`step_layers`) and the timing the step planner prices
    offloading them with, from each region's planning problem
    (``passes.plan_budget.RegionProblem``: its device rates and its ops' times); none when
    fewer than two layers are found. ``min_bytes``: smaller saved tensors stay on the device
    (the offload setting of that name), so they cost no copy."""
    layers = step_layers(keys, reads)
    if len(layers) < 2:
        return [], None
    rates = problems[sequence[0]].rates
    big = {
        r: frozenset(c.name for c in problems[r].problem.candidates if c.nbytes >= min_bytes)
        for r in set(sequence)
    }
    timing = StepTiming(
        bwd_s=[sum(problems[r].problem.timeline.bwd_op_s) for r in sequence],
        h2d_bytes_per_s=rates.h2d_bytes_per_s,
        cpu_s_per_run=rates.run_offload_s,
        fwd_s=[sum(problems[r].problem.timeline.fwd_op_s) for r in sequence],
        d2h_bytes_per_s=rates.d2h_bytes_per_s,
        cpu_s_per_tensor=rates.run_offload_tensor_s,
        tensors={i: big[r] for i, r in enumerate(sequence)},
    )
    return layers, timing
