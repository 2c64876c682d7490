"""Choose a plan: minimise predicted step time subject to predicted peak <= budget.

For each offload lead ``d`` (layer ``l`` offloads finish when layer ``l+d`` begins; see
:mod:`memopt.planner.emit`) the search space is one option ``(strategy, n)`` per cluster.
Small spaces are enumerated (exact); larger ones use the greedy descent and tightening of
:mod:`memopt.planner.greedy`. Every answer carries a proven lower bound on the overhead
(:mod:`memopt.planner.bounds`), so the gap to the optimum is known. The best lead wins.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from memopt import plan as plan_module
from memopt.plan import Strategy
from memopt.planner.bounds import compute_bounds
from memopt.planner.costs import DeviceRates
from memopt.planner.emit import SyncEntry, lead_sync, plan_strings
from memopt.planner.greedy import descend, tighten
from memopt.planner.memory import SavedBytes, memory_profile, saved_bytes
from memopt.planner.problem import PlanningProblem
from memopt.planner.space import KEEP0, ClusterSpace, Option, Space, State
from memopt.planner.timing import StepTime, step_time

#: Largest lead tried by default (more in flight rarely pays once the link keeps up).
MAX_LEAD = 4


@dataclass(frozen=True)
class Solution:
    """The chosen plan and what the models predict for it."""

    feasible: bool
    """Whether the predicted peak fits the budget. If not, the plan is the smallest-peak one found."""
    budget_bytes: int
    decisions: dict[str, Strategy]
    """Non-keep decision per candidate name."""
    cluster_plans: dict[str, tuple[Strategy, int]]
    """Per planned cluster ``(strategy, n)``: its first ``n`` candidates take the strategy
    (explicit plans are not repeated here; they are in ``plan_strings``)."""
    plan_strings: tuple[str, ...]
    """``ClusterId:Strategy:Count`` strings (the user's explicit plans included, verbatim)."""
    sync: dict[int, SyncEntry]
    """Per-layer sync dict for the offloaded layers (empty without offload)."""
    lead: int | None
    """Uniform offload lead of ``sync`` (None without offload)."""
    predicted_peak: int
    baseline_peak: int
    """Peak of the unoptimized plan (every candidate kept, no explicit plans)."""
    time: StepTime
    baseline_step_s: float
    saved: SavedBytes
    """Predicted saved-activation bytes of the plan."""
    min_feasible_peak: int | None
    """Smallest peak found when the budget is infeasible (None when feasible)."""
    peak_lower_bound: int
    """No plan in the search space has a smaller peak."""
    overhead_lower_bound_s: float
    """No plan within the budget has a smaller overhead (``inf`` when none fits)."""
    exact: bool
    """Whether every lead's space was enumerated (the plan is optimal for the models)."""
    notes: tuple[str, ...] = field(default=())

    @property
    def predicted_overhead_s(self) -> float:
        return self.time.overhead_s

    @property
    def gap_s(self) -> float:
        """Overhead above the proven lower bound (0 when exact)."""
        return max(0.0, self.time.overhead_s - self.overhead_lower_bound_s)

    def freeze(self) -> dict[str, object]:
        """Keyword arguments that re-apply this plan without planning (``config``, ``sync``)."""
        return {"config": ",".join(self.plan_strings), "sync": dict(self.sync)}

    def summary(self) -> str:
        """A few lines for the report."""
        pct = 100.0 * self.time.overhead_s / self.baseline_step_s if self.baseline_step_s else 0.0
        head = "fits" if self.feasible else "INFEASIBLE"
        lines = [
            f"budget {_fmt_bytes(self.budget_bytes)}: {head}; predicted peak "
            f"{_fmt_bytes(self.predicted_peak)} (unoptimized {_fmt_bytes(self.baseline_peak)})",
            f"predicted overhead {self.time.overhead_s * 1e3:.3f} ms (+{pct:.1f}% of "
            f"{self.baseline_step_s * 1e3:.3f} ms): recompute {self.time.recompute_s * 1e3:.3f}"
            f" ms, offload stalls {self.time.d2h_stall_s * 1e3:.3f} ms, reload stalls "
            f"{self.time.h2d_stall_s * 1e3:.3f} ms, copy ops {self.time.copy_ops_s * 1e3:.3f} ms",
        ]
        if self.feasible:
            bound = (
                "optimal"
                if self.exact
                else f"lower bound {self.overhead_lower_bound_s * 1e3:.3f} ms"
            )
            lines.append(f"solver: {bound}")
        else:
            lines.append(
                f"smallest peak found {_fmt_bytes(self.min_feasible_peak or 0)}; no plan has a "
                f"peak below {_fmt_bytes(self.peak_lower_bound)}"
            )
        lines.append("plan: " + (",".join(self.plan_strings) or "(keep everything)"))
        if self.sync:
            lines.append(f"sync (lead {self.lead}): {self.sync}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "feasible": self.feasible,
            "budget_bytes": self.budget_bytes,
            "predicted_peak": self.predicted_peak,
            "baseline_peak": self.baseline_peak,
            "predicted_overhead_s": self.time.overhead_s,
            "recompute_s": self.time.recompute_s,
            "offload_stall_s": self.time.d2h_stall_s,
            "reload_stall_s": self.time.h2d_stall_s,
            "copy_ops_s": self.time.copy_ops_s,
            "baseline_step_s": self.baseline_step_s,
            "saved_bytes_on_device": self.saved.on_device,
            "saved_bytes_offloaded": self.saved.offloaded,
            "plan_strings": list(self.plan_strings),
            "sync": {str(k): list(v) for k, v in self.sync.items()},
            "min_feasible_peak": self.min_feasible_peak,
            "peak_lower_bound": self.peak_lower_bound,
            "overhead_lower_bound_s": (
                None if math.isinf(self.overhead_lower_bound_s) else self.overhead_lower_bound_s
            ),
            "exact": self.exact,
            "notes": list(self.notes),
        }


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**30:.3f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.2f} MiB"


@dataclass
class _Result:
    space: Space
    state: State
    peak: int
    overhead_s: float
    exact: bool

    def key(self, feasible: bool) -> tuple:
        """Order of preference: faster, then fewer changed candidates, lower peak, smaller lead
        (or, when nothing fits: lower peak first)."""
        lead = self.space.lead or 0
        changed = sum(n for _, n in self.state)
        if feasible:
            return (round(self.overhead_s, 12), changed, self.peak, lead)
        return (self.peak, round(self.overhead_s, 12), changed, lead)


def _enumerate(space: Space, budget: int) -> tuple[_Result | None, _Result]:
    """Best feasible and smallest-peak states of a small space, by trying every combination."""
    best = smallest = None
    for combo in itertools.product(*(cs.options() for cs in space.clusters)):
        state = list(combo)
        peak = max(space.curve(state))
        r = _Result(space, state, peak, space.step_time(state).overhead_s, True)
        if peak <= budget and (best is None or r.key(True) < best.key(True)):
            best = r
        if smallest is None or r.key(False) < smallest.key(False):
            smallest = r
    assert smallest is not None
    return best, smallest


def _search(space: Space, budget: int) -> tuple[_Result | None, _Result]:
    """Descend and tighten. If the budget is out of reach, the descent ends at the smallest
    peak of the space; that plan is tightened to it instead."""
    d = descend(space, budget)
    if not d.reached:
        return None, _evaluate(space, tighten(space, d.state, d.peak))
    r = _evaluate(space, tighten(space, d.state, budget))
    return r, r


def _restart(best: _Result, budget: int, restarts: int) -> tuple[_Result, int]:
    """Up to ``restarts`` more descents, each with one cluster pinned to another option: this
    repairs what cheapest-ratio-first gets wrong when a few large items decide. Returns the
    best result and the number of restarts used."""
    space = best.space
    t0 = space.base.index(max(space.base))
    seeds = []
    for i, cs in enumerate(space.clusters):
        saves = space.saves_at(i, t0)
        for opt in cs.options():
            if opt != best.state[i]:
                seeds.append((_seed_rank(cs, saves, opt), i, opt))
    seeds.sort(key=lambda x: x[:2])
    seeds = seeds[: max(0, restarts)]
    for _rank, i, opt in seeds:
        start = [KEEP0] * len(space.clusters)
        start[i] = opt
        d = descend(space, budget, start=start, frozen=frozenset([i]))
        if d.reached:
            r = _evaluate(space, tighten(space, d.state, budget))
            if r.key(True) < best.key(True):
                best = r
    return best, len(seeds)


def _seed_rank(cs: ClusterSpace, saves: dict[Strategy, list[int]], opt: Option) -> float:
    """Seeds that save most per recompute second at the base peak first (offload: by bytes)."""
    s, n = opt
    saved = saves[s][n] if n else 0
    return cs.rec_s(opt) / saved if saved > 0 else math.inf


def _evaluate(space: Space, state: State) -> _Result:
    peak = max(space.curve(state))
    return _Result(space, state, peak, space.step_time(state).overhead_s, False)


def default_leads(
    problem: PlanningProblem, strategies: Collection[Strategy] = tuple(Strategy)
) -> list[int | None]:
    n = problem.timeline.n_layers
    can = any(c.offloadable and c.layer is not None for c in problem.candidates)
    if n < 2 or not can or Strategy.OFFLOAD not in strategies:
        return [None]
    return list(range(1, min(n - 1, MAX_LEAD) + 1))


def solve(
    problem: PlanningProblem,
    budget_bytes: int,
    rates: DeviceRates,
    *,
    leads: Sequence[int | None] | None = None,
    strategies: Collection[Strategy] | None = None,
    exact_work: int = 2_000_000,
    restart_work: int = 10_000,
    bound_points: int = 6,
) -> Solution:
    """The fastest predicted plan whose predicted peak fits ``budget_bytes``.

    ``leads``: offload leads to try (default 1..min(n_layers-1, 4); None means no offload).
    ``strategies``: what the planner may choose; default: what this build's plan strings
    accept (:data:`memopt.plan.SUPPORTED_STRATEGIES`), so that the plan can be frozen.
    ``exact_work``: enumerate a lead's space when its number of combinations times the size
    of one evaluation (positions plus candidates) is at most this; 0 never enumerates.
    ``restart_work``: restarts of the greedy per lead, times the lead's number of options (a
    deterministic work limit).
    ``bound_points``: how many positions the lower bounds look at (peaks of the unplanned and
    the chosen curves, overall and per phase).
    """
    allowed = frozenset(plan_module.SUPPORTED_STRATEGIES if strategies is None else strategies)
    leads = default_leads(problem, allowed) if leads is None else list(leads)
    if not leads:
        raise ValueError("no offload lead to try")
    keep_all = PlanningProblem(candidates=problem.candidates, timeline=problem.timeline)
    baseline_peak = memory_profile(keep_all, {}).peak
    baseline_s = problem.timeline.start_s[-1]

    shared: dict = {}
    spaces = [Space(problem, rates, lead, shared, allowed) for lead in leads]
    feasible: list[_Result] = []
    smallest: list[_Result] = []
    all_exact = True
    unit = problem.timeline.n_positions + len(problem.candidates)
    for space in spaces:
        size = math.prod(len(cs.options()) for cs in space.clusters)
        if size * unit <= exact_work:
            best, low = _enumerate(space, budget_bytes)
        else:
            all_exact = False
            best, low = _search(space, budget_bytes)
        if best is not None:
            feasible.append(best)
        smallest.append(low)
    feasible.sort(key=lambda r: r.key(True))
    work = restart_work
    for k, r in enumerate(feasible):  # best lead first, while the work limit lasts
        if not r.exact:
            n_opts = sum(len(cs.options()) for cs in r.space.clusters)
            feasible[k], used = _restart(r, budget_bytes, work // max(1, n_opts))
            work -= used * n_opts
    ok = bool(feasible)
    chosen = (
        min(feasible, key=lambda r: r.key(True))
        if ok
        else min(smallest, key=lambda r: r.key(False))
    )

    points = _bound_points(
        [spaces[0].base, chosen.space.curve(chosen.state)], problem.timeline.n_fwd, bound_points
    )
    bounds = [compute_bounds(sp, budget_bytes, points) for sp in spaces]
    lb_s = min(b.overhead_s for b in bounds) if ok else math.inf
    if all_exact and ok:
        lb_s = chosen.overhead_s
    # A space's smallest peak is exact when enumerated or when its descent got stuck (no
    # option saves anything at the peak); otherwise only the bound is known.
    floors = [
        low.peak if (low.exact or not any(f.space is sp for f in feasible)) else b.peak
        for sp, low, b in zip(spaces, smallest, bounds)
    ]
    lb_peak = min(floors)
    return _solution(
        problem,
        chosen,
        ok,
        budget_bytes,
        rates,
        baseline_peak,
        baseline_s,
        lb_s,
        lb_peak,
        all_exact,
    )


def _bound_points(curves: Sequence[list[int]], n_fwd: int, k: int) -> list[int]:
    """Up to ``k`` positions for the bounds: each curve's peak, then its forward and backward
    peaks (the constraint binds at different places for different strategies)."""
    out: list[int] = []
    for part in ((0, None), (0, n_fwd), (n_fwd, None)):
        for curve in curves:
            seg = curve[part[0] : part[1]]
            if seg:
                pos = part[0] + seg.index(max(seg))
                if pos not in out:
                    out.append(pos)
    return out[:k]


def _solution(
    problem: PlanningProblem,
    r: _Result,
    ok: bool,
    budget: int,
    rates: DeviceRates,
    baseline_peak: int,
    baseline_s: float,
    lb_s: float,
    lb_peak: int,
    exact: bool,
) -> Solution:
    space = r.space
    decisions = space.decisions(r.state)
    cluster_plans = {
        cs.cid: opt for cs, opt in zip(space.clusters, r.state) if opt[0] != Strategy.KEEP
    }
    strings = plan_strings(cluster_plans, problem.clusters)
    fixed = tuple(f"{cid}:{int(s)}:{n}" for cid, (s, n) in sorted(problem.fixed.items()))
    layers = {problem.by_name[n].layer for n, s in decisions.items() if s == Strategy.OFFLOAD}
    lead = space.lead if layers else None
    n = problem.timeline.n_layers
    sync = lead_sync(layers, lead, n) if lead is not None else {}  # type: ignore[arg-type]
    time = step_time(problem, decisions, rates, space.windows)
    peak = memory_profile(problem, decisions, space.windows).peak
    return Solution(
        feasible=ok,
        budget_bytes=budget,
        decisions=decisions,
        cluster_plans=cluster_plans,
        plan_strings=tuple(sorted(strings + fixed)),
        sync=sync,
        lead=lead,
        predicted_peak=peak,
        baseline_peak=baseline_peak,
        time=time,
        baseline_step_s=baseline_s,
        saved=saved_bytes(problem, decisions),
        min_feasible_peak=None if ok else peak,
        peak_lower_bound=lb_peak,
        overhead_lower_bound_s=lb_s,
        exact=exact,
        notes=tuple(space.notes),
    )
