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
ignores the chain rule, which only makes the bound lower, never wrong. Offload inside a region
(its sync dict) is priced by the one-region bound's stall floor (memopt.planner.bounds), at
the lead that makes each option cheapest. Offload of whole runs across the step is not in it:
no bound is made for a step that offloads that way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from memopt.plan import Strategy
from memopt.planner.bounds import cluster_floors, option_hull, relaxed_cost
from memopt.planner.solver import default_leads
from memopt.planner.space import space_of

#: Positions per run whose constraint is relaxed: the run's highest base bytes (its peak
#: without a plan) and the last forward position (what it holds into its backward).
POINTS_PER_RUN = 6


@dataclass(frozen=True)
class StepBound:
    overhead_s: float
    """No step plan that fits the target costs less (``inf``: none fits)."""
    at: int | None
    """The run (position in the step) whose constraint gave it."""


class _Region:
    """One region's searchable clusters, their costs and what each option removes, over every
    offload lead the one-region planner tries (memopt.planner.solver.default_leads): per
    cluster option the most it saves and the least it costs under any lead (a point no lead's
    option beats, so the relaxation stays below every plan)."""

    def __init__(self, problem, rates, saved_inputs: int) -> None:
        leads = [None, *(lead for lead in default_leads(problem) if lead is not None)]
        spaces = [space_of(problem, rates, lead, max_recompute_depth=None) for lead in leads]
        self.spaces = [
            (sp, cluster_floors(sp), {cs.cid: k for k, cs in enumerate(sp.clusters)})
            for sp in spaces
        ]
        cands: dict[str, tuple] = {}
        for sp in spaces:
            for cs in sp.clusters:
                cands.setdefault(cs.cid, cs.cands)
        self.cids = list(cands)
        self.floors = [self._merged(cid, lambda sp, fl, k: fl[k], min) for cid in self.cids]
        # per cluster and strategy: at most the bytes its first n candidates take off the saved
        self.removes = []
        for cid, fl in zip(self.cids, self.floors):
            acc = [0]
            for c in cands[cid]:
                acc.append(acc[-1] + c.nbytes)
            self.removes.append({s: acc[: len(f)] for s, f in fl.items()})
        fixed = set(problem.fixed)
        self.keep = saved_inputs + sum(
            c.nbytes for c in problem.candidates if c.cluster_id not in fixed
        )
        keep = [sp.step_time([(Strategy.KEEP, 0)] * len(sp.clusters)).recompute_s for sp in spaces]
        self.fixed_s = min(keep)
        self.base = [min(col) for col in zip(*(sp.base for sp in spaces))]
        top = sorted(range(len(self.base)), key=lambda t: -self.base[t])[: POINTS_PER_RUN - 1]
        self.points = sorted({*top, max(0, problem.timeline.n_fwd - 1)})
        self.held_hulls = [option_hull(sv, fl) for sv, fl in zip(self.removes, self.floors)]
        self._saves: dict[int, list] = {}

    def _merged(self, cid: str, get, pick) -> dict[Strategy, list]:
        """Per strategy, option by option, ``pick`` (min or max) of ``get(space, floors,
        cluster index)`` over the leads whose space has cluster ``cid`` and that option."""
        out: dict[Strategy, list] = {}
        for sp, fl, idx in self.spaces:
            if cid not in idx:
                continue
            for s, vals in get(sp, fl, idx[cid]).items():
                have = out.setdefault(s, [])
                for n, v in enumerate(vals):
                    if n < len(have):
                        have[n] = pick(have[n], v)
                    else:
                        have.append(v)
        return out

    def saves_at(self, t: int) -> list[dict[Strategy, list[int]]]:
        """Per cluster, the most each option saves at position ``t`` under any lead (merged
        once per position: a region that runs once per layer asks for the same ones)."""
        if t not in self._saves:
            merge = lambda sp, fl, k: sp.saves_at(k, t)  # noqa: E731
            self._saves[t] = [self._merged(cid, merge, max) for cid in self.cids]
        return self._saves[t]


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
            need = held_keep + d.base[t] + off - target
            if need <= 0:
                continue
            cost = relaxed_cost(d.saves_at(t), d.floors, need, const_i, extra=held)
            if cost > best:
                best, at = cost, i
            if math.isinf(cost):
                return StepBound(math.inf, i)
        held_keep += d.keep
        const = const_i
        before[r] = before.get(r, 0) + 1
    return StepBound(best, at)


def with_floor(choice, sequence, problems, target: int, offsets, away):
    """memopt.state's step ``choice`` with its proven floor (:func:`step_bound`), left None
    where runs are offloaded across the step (by the choice, or the user's ``away``), which
    the bound does not cover. ``problems``: the state's planning problem of each region."""
    if choice.offload is not None or away:
        return choice
    regions = {
        r: (problems[r].problem, problems[r].rates, problems[r].saved_input_bytes)
        for r in set(sequence)
    }
    return replace(
        choice, overhead_floor_s=step_bound(sequence, regions, target, offsets).overhead_s
    )
