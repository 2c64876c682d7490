"""A proven lower bound on the overhead of every step plan that fits the step's target.

The step model (memopt.step): run ``i`` of the step fits when

    held(i) + peak(i) + offset(i) <= target,    held(i) = sum over runs j < i of saved(j)

Relax it as memopt.planner.bounds relaxes one region: keep, for run ``i``, one position ``t``
of its region's timeline, where its memory is ``base(t)`` less what its plan saves at ``t``
(``peak(i)`` is at least that). Each earlier run ``j`` holds ``keep(j)`` less what its plan
removes from its saved bytes, and a plan removes at most the bytes of the saved tensors it
moves (counted at their full size, so the relaxation saves at least as much as any plan). What
is left is the LP of a multiple-choice knapsack over the clusters of runs ``0..i``, solved
exactly by walking their lower cost/savings hulls cheapest slope first
(:func:`memopt.planner.bounds.relaxed_cost`). Every step plan that fits also fits each
relaxation, and its overhead is at least the cost of the runs up to ``i``, so the largest LP
value over the kept ``(i, t)`` is a lower bound on its overhead.

The relaxation lets each run choose alone (also when runs of one region compile one plan) and
ignores the chain rule, which only makes the bound lower, never wrong. It covers plans that
recompute (and compromise): offload, inside a region or across the step, is not in it, and the
bound is not made for a step that offloads (None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from memopt.plan import Strategy
from memopt.planner.bounds import option_hull, relaxed_cost
from memopt.planner.space import Space

#: Positions per run whose constraint is relaxed: the run's highest base bytes (its peak
#: without a plan) and the last forward position (what it holds into its backward).
POINTS_PER_RUN = 6


@dataclass(frozen=True)
class StepBound:
    overhead_s: float
    """No step plan that recomputes and fits the target costs less (``inf``: none fits)."""
    at: int | None
    """The run (position in the step) whose constraint gave it."""


class _Region:
    """One region's searchable clusters, their costs and what each option removes."""

    def __init__(self, problem, rates, saved_inputs: int) -> None:
        allowed = (Strategy.KEEP, Strategy.RECOMPUTE, Strategy.COMPROMISE)
        sp = Space(problem, rates, None, strategies=allowed, max_recompute_depth=None)
        self.space = sp
        self.floors = [{s: cs.rprefix[s] for s, m in cs.maxn.items() if m} for cs in sp.clusters]
        # per cluster and strategy: at most the bytes its first n candidates take off the saved
        self.removes = []
        for cs in sp.clusters:
            acc = [0]
            for c in cs.cands:
                acc.append(acc[-1] + c.nbytes)
            self.removes.append({s: acc[: m + 1] for s, m in cs.maxn.items() if m})
        fixed = set(problem.fixed)
        self.keep = saved_inputs + sum(
            c.nbytes for c in problem.candidates if c.cluster_id not in fixed
        )
        self.fixed_s = sp.step_time([(Strategy.KEEP, 0)] * len(sp.clusters)).recompute_s
        tl = problem.timeline
        top = sorted(range(len(sp.base)), key=lambda t: -sp.base[t])[: POINTS_PER_RUN - 1]
        self.points = sorted({*top, max(0, tl.n_fwd - 1)})
        self.held_hulls = [option_hull(sv, fl) for sv, fl in zip(self.removes, self.floors)]


def step_bound(
    sequence: Sequence[int],
    regions: Mapping[int, tuple],
    target: int,
    offsets: Sequence[int] | None = None,
) -> StepBound:
    """The bound for ``sequence`` (region per run) at ``target`` bytes. ``regions``: per region,
    ``(problem, rates, saved_input_bytes)``; ``offsets`` as in memopt.step.step_terms."""
    data = {r: _Region(*regions[r]) for r in set(sequence)}
    best, at = 0.0, None
    held_keep, const = 0, 0.0
    before: dict[int, int] = {}  # region -> runs of it before run i
    for i, r in enumerate(sequence):
        d = data[r]
        off = offsets[i] if offsets else 0
        const_i = const + d.fixed_s
        held = [(before[q], h) for q in before for h in data[q].held_hulls]
        for t in d.points:
            need = held_keep + d.space.base[t] + off - target
            if need <= 0:
                continue
            here = [d.space.saves_at(k, t) for k in range(len(d.space.clusters))]
            cost = relaxed_cost(here, d.floors, need, const_i, extra=held)
            if cost > best:
                best, at = cost, i
            if math.isinf(cost):
                return StepBound(math.inf, i)
        held_keep += d.keep
        const = const_i
        before[r] = before.get(r, 0) + 1
    return StepBound(best, at)


def with_floor(choice, sequence, menus, problems, target: int, offsets, away):
    """memopt.state's step ``choice`` with its proven floor (:func:`step_bound`), left None
    where the step may offload (a menu option with a sync dict, layers offloaded across the
    step by the choice or by the user's ``away``), which the bound does not cover.
    ``problems``: the state's planning problem of each region."""
    if choice.offload is not None or away or any(o.sync for r in menus for o in menus[r]):
        return choice
    regions = {
        r: (problems[r].problem, problems[r].rates, problems[r].saved_input_bytes)
        for r in set(sequence)
    }
    return replace(
        choice, overhead_floor_s=step_bound(sequence, regions, target, offsets).overhead_s
    )
