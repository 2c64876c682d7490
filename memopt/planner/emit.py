"""From a chosen plan to what the user can freeze: plan strings and the per-layer sync dict.

Sync dict entry for an offloaded layer ``i``: ``(offload_fwd, offload_num, reload_fwd,
reload_num)``. ``(True, k)`` names the moment the forward of layer ``k`` begins (exactly ``k``
layers have begun their forward before it); ``(False, k)`` names the moment the ``k``-th
backward layer begins, counting from 0 in backward order (layer ``n-1-k``; ``k`` layers have
begun their backward before it). The offload of layer ``i`` must have finished, and its GPU
memory is released, at the first moment; its reload starts at the second.

With a uniform lead ``d`` (what the planner chooses), layer ``i`` gets
``(True, i+d, False, n-1-i-d)``: finished when layer ``i+d``'s forward begins, reloaded when
layer ``i+d``'s backward begins. (``offload_layers=k`` follows
:func:`memopt.offload.sync.default_sync`, which reloads one layer later.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from memopt.plan import Strategy
from memopt.planner.problem import Candidate, OffloadWindow, PlanningProblem, StepTimeline

SyncEntry = tuple[bool, int, bool, int]


def event_to_sync(event: int, n_layers: int) -> tuple[bool, int]:
    """A layer event (0..2n-1, see :mod:`memopt.planner.problem`) as ``(fwd, num)``."""
    if not 0 <= event < 2 * n_layers:
        raise ValueError(f"layer event {event} outside 0..{2 * n_layers - 1}")
    return (True, event) if event < n_layers else (False, event - n_layers)


def sync_to_event(fwd: bool, num: int, n_layers: int) -> int:
    """Inverse of :func:`event_to_sync`."""
    event = num if fwd else n_layers + num
    if not 0 <= num < n_layers:
        raise ValueError(f"sync count {num} outside 0..{n_layers - 1}")
    return event


def lead_sync(layers: Iterable[int], lead: int, n_layers: int) -> dict[int, SyncEntry]:
    """Sync entries for ``layers`` offloaded with a uniform ``lead``."""
    out = {}
    for layer in sorted(set(layers)):
        if layer + lead >= n_layers:
            raise ValueError(f"layer {layer} has no offload window with lead {lead}")
        rel = event_to_sync(layer + lead, n_layers)
        rld = event_to_sync(2 * n_layers - 1 - layer - lead, n_layers)
        out[layer] = (*rel, *rld)
    return out


def sync_windows(
    sync: Mapping[int, Sequence[object]], timeline: StepTimeline
) -> dict[int, OffloadWindow]:
    """The offload windows a sync dict describes (to evaluate a user's own sync)."""
    n = timeline.n_layers
    out = {}
    for layer, entry in sync.items():
        of, on, rf, rn = entry
        rel = sync_to_event(bool(of), int(on), n)  # type: ignore[arg-type]
        rld = sync_to_event(bool(rf), int(rn), n)  # type: ignore[arg-type]
        out[int(layer)] = OffloadWindow(timeline.event_pos(rel), timeline.event_pos(rld))
    return out


def plan_count(cands: Sequence[Candidate], n: int) -> int:
    """Plan Count covering the first ``n`` of ``cands`` (-1 when that is all of them)."""
    if n >= len(cands):
        return -1
    return cands[n - 1].occurrence + 1


def solution_strings(
    cluster_plans: Mapping[str, tuple[Strategy, int]], problem: PlanningProblem
) -> tuple[str, ...]:
    """A solution's plan strings: :func:`plan_strings` and the problem's fixed plans
    (``problem.fixed``, the user's own), sorted."""
    fixed = tuple(f"{cid}:{int(s)}:{n}" for cid, (s, n) in sorted(problem.fixed.items()))
    return tuple(sorted(plan_strings(cluster_plans, problem.clusters) + fixed))


def plan_strings(
    cluster_plans: Mapping[str, tuple[Strategy, int]], clusters: Mapping[str, Sequence[Candidate]]
) -> tuple[str, ...]:
    """``ClusterId:Strategy:Count`` for every cluster whose plan is not keep, sorted by id.

    ``cluster_plans`` maps a cluster to ``(strategy, n)``: the first ``n`` candidates in
    forward order take the strategy, the rest are kept.
    """
    out = []
    for cid in sorted(cluster_plans):
        s, n = cluster_plans[cid]
        if s == Strategy.KEEP or n == 0:
            continue
        out.append(f"{cid}:{int(s)}:{plan_count(clusters[cid], n)}")
    return tuple(out)
