"""Give back recompute a plan does not need once it is priced as decide applies it.

Under the recompute-chain rule the solver plans with candidates marked kept (the rounds of
:func:`memopt.planner.solver._solve_chains`), but its plan strings are prefixes: decide
recomputes every occurrence of a prefix that its own chain check accepts, including the ones
the round had marked kept. The plan as applied then recomputes more than the solver chose and
peaks under the budget. On ResNet-50 (bf16, batch 128, an H100's kernel times, budget 3.19 GB)
the plan as applied peaked at 2.88 GB at 2.70 ms of predicted overhead, 36% over the proven
bound (1.98 ms); the round's own plan, 3.18 GB at 2.06 ms, cannot be written as prefixes.

:func:`relax` lowers prefix counts while the plan, as decide applies it, stays within the
budget: each pass takes the one count change that saves the most predicted time (a steepest
descent in the prefix counts; every trial is priced with the chain refusals it implies), until
no change saves time or the work limit is spent. Plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from memopt.plan import Strategy
from memopt.planner.chains import REBUILT, Chains, refused
from memopt.planner.costs import DeviceRates
from memopt.planner.emit import solution_strings, sync_windows
from memopt.planner.memory import applied_strategy, memory_profile, saved_bytes
from memopt.planner.problem import PlanningProblem
from memopt.planner.solution import Solution
from memopt.planner.timing import StepTime, step_time

#: Work per :func:`relax` call at most: plans priced times (positions + candidates), each trial
#: pricing one memory curve and one step (the solver's ``exact_work`` unit). A deterministic
#: limit: ResNet-50 (3,768 positions, 209 candidates) took 133 trials, 0.3 s, of 502 allowed.
RELAX_WORK = 2_000_000

_TOL = 1e-12


def applied(
    problem: PlanningProblem, covered: Mapping[str, Strategy], chains: Chains
) -> dict[str, Strategy]:
    """The decisions decide applies for the candidates a plan's prefixes cover: a recompute
    its chain check refuses stays kept (:func:`memopt.planner.chains.refused`)."""
    index = {c.name: i for i, c in enumerate(problem.candidates)}
    rebuilt = {index[n]: s for n, s in covered.items() if s in REBUILT}
    no = {problem.candidates[i].name for i in refused(chains, problem.candidates, rebuilt)}
    return {
        n: s
        for n, s in covered.items()
        if not (n in no and s in REBUILT) and applied_strategy(problem.by_name[n], s) == s
    }


def relax(problem: PlanningProblem, sol: Solution, rates: DeviceRates, chains: Chains) -> Solution:
    """``sol`` with fewer recomputed occurrences where the plan as applied leaves room under
    its budget and dropping them saves time; ``sol`` itself when nothing moves."""
    if not sol.feasible or not chains.active:
        return sol
    windows = sync_windows(sol.sync, problem.timeline) if sol.sync else {}
    movable = [
        cid
        for cid, (s, n) in sorted(sol.cluster_plans.items())
        if s in REBUILT and n > 0 and cid not in problem.fixed
    ]
    if not movable:
        return sol
    plans = dict(sol.cluster_plans)
    covered = dict(sol.covered)
    trials, most = 0, max(1, RELAX_WORK // (problem.timeline.n_positions + len(problem.candidates)))

    def price(plans_: dict, cid: str, m: int) -> tuple[int, StepTime, dict, dict]:
        s, n = plans_[cid]
        cov = dict(covered)
        for c in problem.clusters[cid][m:n]:
            cov.pop(c.name, None)
        dec = applied(problem, cov, chains)
        return (
            memory_profile(problem, dec, windows).peak,
            step_time(problem, dec, rates, windows),
            cov,
            dec,
        )

    now = sol.time.overhead_s
    best_state = None
    while trials < most:
        best = None
        for cid in movable:
            s, n = plans[cid]
            for m in range(n - 1, -1, -1):
                if trials >= most:
                    break
                trials += 1
                peak, time, cov, dec = price(plans, cid, m)
                if peak > sol.budget_bytes:
                    break  # fewer occurrences hold more bytes: smaller counts fit no better
                if time.overhead_s < now - _TOL and (best is None or time.overhead_s < best[0]):
                    best = (time.overhead_s, cid, m, peak, time, cov, dec)
        if best is None:
            break
        now, cid, m, peak, time, covered, dec = best
        plans[cid] = (plans[cid][0], m)
        best_state = (peak, time, dec)
    if best_state is None:
        return sol
    peak, time, dec = best_state
    cluster_plans = {c: o for c, o in plans.items() if o[0] != Strategy.KEEP and o[1] > 0}
    return replace(
        sol,
        decisions=dec,
        cluster_plans=cluster_plans,
        plan_strings=solution_strings(cluster_plans, problem),
        predicted_peak=peak,
        time=time,
        saved=saved_bytes(problem, dec),
        overhead_lower_bound_s=min(sol.overhead_lower_bound_s, time.overhead_s),
        exact=False,
        covered=covered,
    )
