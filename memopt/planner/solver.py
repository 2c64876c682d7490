"""Choose a plan: minimise predicted step time subject to predicted peak <= budget.

For each offload lead ``d`` (layer ``l`` offloads finish when layer ``l+d`` begins; see
:mod:`memopt.planner.emit`) the search space is one option ``(strategy, n)`` per cluster.
Small spaces are enumerated (exact); larger ones use the greedy descent and tightening of
:mod:`memopt.planner.greedy`. Every answer carries a proven lower bound on the overhead
(:mod:`memopt.planner.bounds`), so the gap to the optimum is known. The best lead wins.
A proven floor on the peak comes first: a budget below it is infeasible without any search
for a plan within it. The recompute-chain rule (:mod:`memopt.planner.chains`) is obeyed two
ways, the better plan wins (:func:`solve`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from memopt import plan as plan_module
from memopt.plan import Strategy
from memopt.planner import progress
from memopt.planner.bounds import compute_bounds, peak_floor
from memopt.planner.chains import MAX_RECOMPUTE_DEPTH, REBUILT, Chains, refused
from memopt.planner.costs import DeviceRates
from memopt.planner.emit import lead_sync, solution_strings, sync_windows
from memopt.planner.greedy import descend, lowest_peak, tighten
from memopt.planner.memory import applied_strategy, memory_profile, saved_bytes
from memopt.planner.problem import PlanningProblem
from memopt.planner.relax import applied, relax
from memopt.planner.solution import Solution, fmt_bytes
from memopt.planner.space import KEEP0, ClusterSpace, Option, Space, State, space_of
from memopt.planner.timing import step_time

#: Largest lead tried by default (more in flight rarely pays once the link keeps up).
MAX_LEAD = 4


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
    """Best feasible and smallest-peak states of a small space, by trying every combination
    (the space's enumeration, made once: :meth:`Space.enumerated`). Ties go to the first in
    product order, as :meth:`_Result.key` orders them."""
    table = space.enumerated()
    assert table
    fits = (e for e in table if e[1] <= budget)
    best = min(fits, key=lambda e: (e[2], e[3], e[1]), default=None)
    low = min(table, key=lambda e: (e[1], e[2], e[3]))

    def result(e: tuple) -> _Result:
        return _Result(space, list(e[0]), e[1], space.step_time(e[0]).overhead_s, True)

    return (None if best is None else result(best)), result(low)


def _search(space: Space, budget: int, floor: int, gradual: bool) -> tuple[_Result | None, _Result]:
    """Descend and tighten. If the descent misses the budget (or ``floor``, a proven floor on
    the peak, is above it), the plan of the smallest peak found is tightened to that peak,
    or to the budget when it fits after all."""
    if budget >= floor:
        d = descend(space, budget)
        if d.reached:
            r = _evaluate(space, tighten(space, d.state, budget))
            return r, r
    low = lowest_peak(space, floor, gradual=gradual)
    if low.peak <= budget:
        r = _evaluate(space, tighten(space, low.state, budget))
        return r, r
    return None, _evaluate(space, tighten(space, low.state, low.peak))


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
        if not space.chain_ok(start):
            continue
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


def descending(solve_at: Callable[[int], Solution]) -> Callable[[int], Solution]:
    """``solve_at`` over budgets asked in descending order, solved again only where the last
    answer may not hold. A plan found for a looser budget that fits this one stays the fastest
    found: every plan fitting this budget fits the looser one. Where no plan fit a looser
    budget and its peak is at its ``peak_lower_bound``, none fits this one and that plan is
    the answer again. That bound is the floor of prefix plans, clamped to the chosen plan's
    peak (:func:`_better`): at it, the plan is the smallest peak of the prefix plans or below
    all of them, a judgment, not a proof, for plans that skip inside a cluster (the menus'
    options were unchanged on every test and on the CLI's Mistral). An infeasible answer
    above its bound is solved again: the
    search for the smallest peak starts from the budget (a 4-layer Mistral traced by
    ``memopt plan`` got a cheaper plan at one share, fewer saved bytes at the next). The step
    planner's menus ask 20 budgets per region (memopt.step.region_menu)."""
    last: list = []  # [budget, solution]

    def holds(sol: Solution, budget: int) -> bool:
        if sol.feasible:
            return sol.predicted_peak <= budget
        return sol.predicted_peak <= sol.peak_lower_bound

    def at(budget: int) -> Solution:
        if not last or budget > last[0] or not holds(last[1], budget):
            last[:] = [budget, solve_at(budget)]
        last[0] = budget
        return last[1]

    return at


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
    max_recompute_depth: int = MAX_RECOMPUTE_DEPTH,
) -> Solution:
    """The fastest predicted plan whose predicted peak fits ``budget_bytes``.

    ``leads``: offload leads to try (default 1..min(n_layers-1, 4); None means no offload).
    ``strategies``: what the planner may choose; default: what this build's plan strings
    accept (:data:`memopt.plan.SUPPORTED_STRATEGIES`), so that the plan can be frozen.
    ``exact_work``: enumerate a lead's space when its number of combinations times the size
    of one evaluation (positions plus candidates) is at most this; 0 never enumerates.
    ``restart_work``: restarts of the greedy per lead, times the lead's number of options (a
    deterministic work limit).
    ``bound_points``: how many positions the overhead bound looks at (peaks of the unplanned
    and the chosen curves, overall and per phase).
    ``max_recompute_depth``: no recompute reads more than this many chained recomputes deep
    (:mod:`memopt.planner.chains`; :func:`~memopt.planner.chains.planner_depth` gives a
    region's). The search prices each recompute from its own first backward use; the chosen
    plan's peak counts chains rebuilt earlier (:func:`memopt.planner.memory.chain_intervals`).
    Deeper than :data:`MAX_RECOMPUTE_DEPTH`, a plan those push over the budget loses to the
    plan solved at that depth when that one is better.
    """
    kw = dict(
        leads=leads,
        strategies=strategies,
        exact_work=exact_work,
        restart_work=restart_work,
        bound_points=bound_points,
    )
    progress.note(f"solving: {len(problem.candidates)} candidates")
    sol = _solve_chains(problem, budget_bytes, rates, max_recompute_depth, kw)
    if not sol.feasible:
        # Nothing fits: search the smallest peak again with the gradual descent as well
        # (:func:`~memopt.planner.greedy.lowest_peak`). Its smaller peak in one round can end
        # the chain rounds with a larger one: a 4-layer tiny Llama at half its peak got
        # 1.81 MiB that way, 1.62 without it; under CPU autocast the zoo's 2-layer tiny Llama
        # got only the gradual descent's plans (2.59 MiB where at once gave none below 3.16).
        gradual = _solve_chains(
            problem, budget_bytes, rates, max_recompute_depth, dict(kw, gradual=True)
        )
        sol = min((sol, gradual), key=_preference)
    if max_recompute_depth > MAX_RECOMPUTE_DEPTH and not sol.feasible:
        shallow = _solve_chains(problem, budget_bytes, rates, MAX_RECOMPUTE_DEPTH, kw)
        sol = min((sol, shallow), key=_preference)
    progress.note(
        f"solved: overhead {sol.predicted_overhead_s * 1e3:.3f} ms (bound "
        f"{sol.overhead_lower_bound_s * 1e3:.3f} ms)"
        if sol.feasible
        else f"solved: INFEASIBLE, smallest peak {fmt_bytes(sol.predicted_peak)} (bound "
        f"{fmt_bytes(sol.peak_lower_bound)})"
    )
    return sol


def _solve_chains(
    problem: PlanningProblem, budget_bytes: int, rates: DeviceRates, max_depth: int, kw: dict
) -> Solution:
    chains = Chains(problem.candidates, max_depth)
    if not chains.active:
        return _solve_once(problem, budget_bytes, rates, None, **kw)
    # Two ways to obey the rule; the better plan wins. (1) As decide applies plans: solve
    # without the rule, mark what decide would keep (recompute acts as keep there) and solve
    # again until nothing new is kept; decide then skips occurrences inside a cluster's
    # prefix, which prefixes alone cannot say. (2) Whole prefixes that obey the rule; not
    # needed when (1) never had to keep anything.
    index = {c.name: i for i, c in enumerate(problem.candidates)}
    kept: set[str] = set()
    rounds: list[Solution] = []  # each round's plan, priced as decide applies it
    for _ in range(CHAIN_ROUNDS):
        marked = _marked(problem, kept)
        sol = _solve_once(marked, budget_bytes, rates, None, **kw)
        rebuilt = {index[n]: s for n, s in sol.covered.items() if s in REBUILT}
        new = {problem.candidates[i].name for i in refused(chains, problem.candidates, rebuilt)}
        if not new and not kept:
            if sol.feasible:
                return sol
            # nothing fits: the smallest peak of either way is the answer
            return _better(_solve_once(problem, budget_bytes, rates, max_depth, **kw), sol)
        rounds.append(_as_applied(problem, sol, chains, rates))
        if not new - kept:
            break
        kept |= new
    # a later round is solved under more marks than decide applies to its plan, so it may
    # recompute more than it needs: the best round wins (ResNet-50 on the CPU at 75% of its
    # unplanned peak: the third of five rounds at 134 ms of predicted overhead, the last 244)
    # its prefixes, as decide applies them, may recompute what the round had kept: give back
    # what the budget does not need (memopt.planner.relax)
    best = relax(problem, min(rounds, key=_preference), rates, chains)
    return _better(_solve_once(problem, budget_bytes, rates, max_depth, **kw), best)


def _marked(problem: PlanningProblem, kept: set[str]) -> PlanningProblem:
    """``problem`` with the candidates ``kept`` marked kept by the chain rule; the same object
    for the same marks (its memo, and so its spaces, serve every budget solved)."""
    if not kept:
        return problem
    key = ("marked", frozenset(kept))
    got = problem.memo.get(key)
    if got is None:
        cands = tuple(
            replace(c, kept_by_chain=True) if c.name in kept else c for c in problem.candidates
        )
        got = problem.memo[key] = replace(problem, candidates=cands)
    return got


#: Solves of :func:`solve` that mark more candidates kept before it plans prefixes only.
CHAIN_ROUNDS = 8


def _as_applied(
    problem: PlanningProblem, sol: Solution, chains: Chains, rates: DeviceRates
) -> Solution:
    """``sol``, solved with every candidate an earlier round refused marked kept, as decide
    applies its plan strings (:func:`memopt.planner.relax.applied`): only what decide refuses
    for this plan's own recomputes stays kept, and a candidate an earlier plan's chains refused
    is recomputed (ResNet-50's relaxed step plan on an H200: 20 ReLU outputs, 649 MB,
    recomputed that the solver had kept; the plan peaked 504 MB under its prediction)."""
    decisions = applied(problem, sol.covered, chains)
    if decisions == sol.decisions:
        return sol
    windows = sync_windows(sol.sync, problem.timeline) if sol.sync else {}
    peak = memory_profile(problem, decisions, windows).peak
    fits = peak <= sol.budget_bytes
    return replace(
        sol,
        decisions=decisions,
        time=step_time(problem, decisions, rates, windows),
        predicted_peak=peak,
        saved=saved_bytes(problem, decisions),
        feasible=fits,
        min_feasible_peak=None if fits else peak,
    )


def _better(prefix: Solution, skipping: Solution) -> Solution:
    """The better plan, with bounds that hold for both kinds of plan: the floor (per-candidate
    savings) of the whole problem, and no overhead bound above either plan's overhead (the LP
    sees prefixes only; a plan that skips inside one can beat it)."""
    chosen = min((prefix, skipping), key=_preference)
    return replace(
        chosen,
        peak_lower_bound=min(prefix.peak_lower_bound, chosen.predicted_peak),
        overhead_lower_bound_s=min(
            prefix.overhead_lower_bound_s,
            skipping.overhead_lower_bound_s,
            skipping.predicted_overhead_s if skipping.feasible else math.inf,
        ),
        exact=False,
    )


def _preference(sol: Solution) -> tuple:
    if sol.feasible:
        return (0, round(sol.predicted_overhead_s, 12), sol.predicted_peak)
    return (1, sol.predicted_peak, round(sol.predicted_overhead_s, 12))


def _solve_once(
    problem: PlanningProblem,
    budget_bytes: int,
    rates: DeviceRates,
    max_recompute_depth: int | None,
    *,
    leads: Sequence[int | None] | None,
    strategies: Collection[Strategy] | None,
    exact_work: int,
    restart_work: int,
    bound_points: int,
    gradual: bool = False,
) -> Solution:
    allowed = frozenset(plan_module.SUPPORTED_STRATEGIES if strategies is None else strategies)
    leads = default_leads(problem, allowed) if leads is None else list(leads)
    if not leads:
        raise ValueError("no offload lead to try")
    keep_all = PlanningProblem(candidates=problem.candidates, timeline=problem.timeline)
    baseline_peak = memory_profile(keep_all, {}).peak
    baseline_s = problem.timeline.start_s[-1]

    spaces = [space_of(problem, rates, lead, allowed, max_recompute_depth) for lead in leads]
    floors = [peak_floor(sp)[0] for sp in spaces]
    if budget_bytes < min(floors):
        progress.note(f"infeasible: no plan peaks below {fmt_bytes(min(floors))}")
    unit = problem.timeline.n_positions + len(problem.candidates)
    feasible, smallest, all_exact = _search_leads(
        spaces, floors, budget_bytes, exact_work, unit, gradual
    )
    ok = bool(feasible)
    pick = feasible[0] if ok else min(smallest, key=lambda r: r.key(False))
    points = _bound_points(
        [spaces[0].base, pick.space.curve(pick.state)], problem.timeline.n_fwd, bound_points
    )
    bounds = {id(sp): compute_bounds(sp, budget_bytes, points) for sp in spaces}
    lb_s = min(b.overhead_s for b in bounds.values()) if ok else math.inf
    _restart_leads(feasible, bounds, lb_s, budget_bytes, restart_work)
    chosen = min(feasible, key=lambda r: r.key(True)) if ok else pick
    if all_exact and ok:
        lb_s = chosen.overhead_s
    lb_peak = min(
        low.peak if low is not None and low.exact else max(floor, bounds[id(sp)].peak)
        for sp, floor, low in zip(spaces, floors, _lows(spaces, smallest))
    )
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


#: Seconds below which two overheads are equal.
_TOL = 1e-12


def _search_leads(
    spaces: Sequence[Space],
    floors: Sequence[int],
    budget: int,
    exact_work: int,
    unit: int,
    gradual: bool,
) -> tuple[list[_Result], list[_Result], bool]:
    """Per lead, lowest floor first: the best plan within the budget (sorted, best first),
    the smallest peak found, and whether every lead was enumerated. A lead whose floor is
    over the budget and over a smaller peak already found is skipped."""
    feasible: list[_Result] = []
    smallest: list[_Result] = []
    all_exact = True
    for space, floor in sorted(zip(spaces, floors), key=lambda x: x[1]):
        size = math.prod(len(cs.options()) for cs in space.clusters)
        if size * unit <= exact_work:
            best, low = _enumerate(space, budget)
        else:
            all_exact = False
            if budget < floor and smallest and min(r.peak for r in smallest) < floor:
                continue  # neither a plan within the budget nor a smaller peak here
            best, low = _search(space, budget, floor, gradual)
        if best is not None:
            feasible.append(best)
        smallest.append(low)
        _note_lead(space, best, low)
    feasible.sort(key=lambda r: r.key(True))
    return feasible, smallest, all_exact


def _restart_leads(
    feasible: list[_Result], bounds: dict, lb_s: float, budget: int, restart_work: int
) -> None:
    """Restart the greedy of each lead, best first, while the work limit lasts; not for a lead
    whose bound shows it cannot beat the best plan, nor once the best plan meets the bound."""
    work = restart_work
    for k, r in enumerate(feasible):
        incumbent = min(f.overhead_s for f in feasible)
        if r.exact or incumbent <= lb_s + _TOL or bounds[id(r.space)].overhead_s >= incumbent:
            continue
        n_opts = sum(len(cs.options()) for cs in r.space.clusters)
        feasible[k], used = _restart(r, budget, work // max(1, n_opts))
        work -= used * n_opts


def _lows(spaces: Sequence[Space], smallest: Sequence[_Result]) -> list[_Result | None]:
    by_space = {id(r.space): r for r in smallest}
    return [by_space.get(id(sp)) for sp in spaces]


def _note_lead(space: Space, best: _Result | None, low: _Result) -> None:
    what = (
        f"fits, overhead {best.overhead_s * 1e3:.3f} ms"
        if best is not None
        else f"smallest peak {fmt_bytes(low.peak)}"
    )
    progress.note(f"lead {space.lead}: {what}")


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
    covered = space.decisions(r.state)
    decisions = {n: s for n, s in covered.items() if applied_strategy(problem.by_name[n], s) == s}
    cluster_plans = {
        cs.cid: opt for cs, opt in zip(space.clusters, r.state) if opt[0] != Strategy.KEEP
    }
    layers = {problem.by_name[n].layer for n, s in decisions.items() if s == Strategy.OFFLOAD}
    lead = space.lead if layers else None
    n = problem.timeline.n_layers
    sync = lead_sync(layers, lead, n) if lead is not None else {}  # type: ignore[arg-type]
    time = step_time(problem, decisions, rates, space.windows)
    peak = memory_profile(problem, decisions, space.windows).peak
    ok = ok and peak <= budget  # chains rebuilt early (chain_intervals) may break the budget
    return Solution(
        feasible=ok,
        budget_bytes=budget,
        decisions=decisions,
        cluster_plans=cluster_plans,
        plan_strings=solution_strings(cluster_plans, problem),
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
        covered=covered,
    )
