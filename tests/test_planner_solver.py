"""The budget planner's solver on hand-made problems: exact plans, peaks and times.

Units: 1 MiB tensors and milliseconds. The rates make 1 MiB of memory traffic or of PCIe copy
take 1 ms and 1 GFLOP take 1 ms.

The 4-layer problem (2 ops per layer, forward ops take 1 ms, backward ops 2 ms):

    A_l  4 MiB, made by op 0 of layer l, first used by op 1 of its backward; recompute is one
         op reading+writing 2 MiB (1 GFLOP): memory-bound, 2 ms
    B_l  2 MiB, made by op 1, first used by op 0 of its backward; recompute: 8 GFLOP, 8 ms

Keeping everything peaks at 24 MiB around the forward/backward boundary.
"""

from __future__ import annotations

import itertools
import json
import random
import time

import pytest

from memopt.config import resolve_config
from memopt.plan import Strategy
from memopt.planner import (
    DeviceRates,
    OpCost,
    PlanningProblem,
    lead_windows,
    memory_profile,
    resolve_budget,
    solve,
    step_time,
)
from memopt.planner.solver import default_leads
from memopt.planner.synthetic import LayerTensor, MiB, layered_problem, random_layer_tensors

MS = 1e-3
ALL = frozenset(Strategy)  # the solver's tests do not depend on what this build can apply
RATES = DeviceRates(
    name="test",
    matmul_flops_per_s=1e12,
    hbm_bytes_per_s=MiB / MS,
    h2d_bytes_per_s=MiB / MS,
    d2h_bytes_per_s=MiB / MS,
)
A = LayerTensor("A+", 4 * MiB, 0, (OpCost(flops=1e9, bytes=2 * MiB),))
B = LayerTensor("B+", 2 * MiB, 1, (OpCost(flops=8e9, bytes=MiB),))


def four_layers(**kw) -> PlanningProblem:
    return layered_problem([A, B], n_layers=4, ops_per_layer=2, fwd_op_s=MS, **kw)


# budget MiB -> (plan strings, sync, overhead ms)
CASES = {
    24: ((), {}, 0.0),
    # Offload A_0 with lead 2: 4 ms of copy, 3 ms of forward to hide it -> 1 ms stall; beats
    # recomputing A_0 (2 ms) and lead 3 (its reload lands on the 24 MiB peak).
    20: (("A+:3:1",), {0: (True, 2, False, 1)}, 1.0),
    16: (("A+:1:2",), {}, 4.0),
    12: (("A+:1:3",), {}, 6.0),
    # Recomputing every A fits 8 MiB at the boundary, but A_3 comes back at backward op 2
    # while B_2, B_1, B_0 are still live (10 MiB): B_0 must leave too, offloaded for free.
    8: (("A+:1:-1", "B+:3:1"), {0: (True, 2, False, 1)}, 8.0),
    4: (("A+:1:-1", "B+:1:3"), {}, 32.0),
}


@pytest.mark.parametrize("exact_work", [10**6, 0], ids=["enumerate", "greedy"])
@pytest.mark.parametrize("budget", sorted(CASES))
def test_four_layers_exact_plans(budget: int, exact_work: int) -> None:
    plans, sync, overhead_ms = CASES[budget]
    sol = solve(four_layers(), budget * MiB, RATES, exact_work=exact_work, strategies=ALL)
    assert sol.feasible
    assert sol.plan_strings == plans
    assert sol.sync == sync
    assert sol.predicted_peak == budget * MiB
    assert sol.predicted_overhead_s == pytest.approx(overhead_ms * MS, abs=1e-12)
    assert sol.baseline_peak == 24 * MiB
    assert sol.baseline_step_s == pytest.approx(30 * MS)
    assert sol.overhead_lower_bound_s <= sol.predicted_overhead_s + 1e-12
    assert sol.exact == (exact_work > 0)
    if sol.exact:
        assert sol.overhead_lower_bound_s == pytest.approx(overhead_ms * MS, abs=1e-12)


def test_time_breakdown_and_saved_bytes() -> None:
    sol = solve(four_layers(), 20 * MiB, RATES, strategies=ALL)
    assert sol.time.d2h_stall_s == pytest.approx(1 * MS)
    assert sol.time.recompute_s == 0.0 and sol.time.h2d_stall_s == 0.0
    assert sol.decisions == {"A_0": Strategy.OFFLOAD}
    assert sol.saved.on_device == 20 * MiB and sol.saved.offloaded == 4 * MiB
    sol = solve(four_layers(), 8 * MiB, RATES, strategies=ALL)
    assert sol.time.recompute_s == pytest.approx(8 * MS)
    assert sol.saved.on_device == 6 * MiB and sol.saved.offloaded == 2 * MiB


@pytest.mark.parametrize("exact_work", [10**6, 0], ids=["enumerate", "greedy"])
def test_infeasible_budget_reports_smallest_peak(exact_work: int) -> None:
    sol = solve(four_layers(), 3 * MiB, RATES, exact_work=exact_work, strategies=ALL)
    assert not sol.feasible
    # Every A_l must exist at its backward use: 4 MiB is the floor, and it is reached.
    assert sol.min_feasible_peak == 4 * MiB
    assert sol.predicted_peak == 4 * MiB
    assert sol.peak_lower_bound == 4 * MiB
    assert sol.overhead_lower_bound_s == float("inf")
    assert "INFEASIBLE" in sol.summary()
    assert json.loads(json.dumps(sol.to_dict()))["min_feasible_peak"] == 4 * MiB


def test_explicit_plan_is_kept_and_planned_around() -> None:
    # The user recomputes every B (4 x 8 ms). That leaves 18 MiB (four A plus B_3 where it
    # is made and used); one A must go: offloading A_0 (1 ms stall) beats recomputing it.
    problem = four_layers(fixed={"B+": (1, -1)})
    sol = solve(problem, 16 * MiB, RATES, strategies=ALL)
    assert sol.plan_strings == ("A+:3:1", "B+:1:-1")
    assert sol.predicted_overhead_s == pytest.approx(33 * MS)
    assert sol.time.recompute_s == pytest.approx(32 * MS)
    assert sol.predicted_peak == 14 * MiB


def test_explicit_offload_that_cannot_apply_is_noted() -> None:
    # Layer 3 has no window (nothing after it), so B_3 stays; the note says so.
    sol = solve(four_layers(fixed={"B+": (3, -1)}), 24 * MiB, RATES, leads=[1])
    assert any("B_3" in n for n in sol.notes)
    assert sol.plan_strings == ("B+:3:-1",)


def test_compromise_when_it_is_cheaper() -> None:
    # Three layers of a 4 MiB cast output. Recomputing it reads+writes 8 MiB (8 ms); the
    # compromise keeps a 1 MiB input and redoes a 1 ms op. 9 MiB needs 3 MiB saved: one
    # compromise does it; 6 MiB needs two compromises (6 MiB saved).
    t = LayerTensor(
        "Cast+",
        4 * MiB,
        0,
        (OpCost(bytes=8 * MiB),),
        compromise_kept_bytes=MiB,
        compromise_ops=(OpCost(bytes=MiB),),
        offloadable=False,
    )
    problem = layered_problem([t], n_layers=3, ops_per_layer=2, fwd_op_s=MS)
    for work in (10**6, 0):
        sol = solve(problem, 9 * MiB, RATES, exact_work=work, strategies=ALL)
        assert sol.plan_strings == ("Cast+:2:1",)
        assert sol.predicted_peak == 9 * MiB and sol.predicted_overhead_s == pytest.approx(MS)
        sol = solve(problem, 6 * MiB, RATES, exact_work=work, strategies=ALL)
        assert sol.plan_strings == ("Cast+:2:2",)
        assert sol.saved.on_device == 6 * MiB
        # Compromising all three fits the boundary (3 MiB) but not the backward: when layer 2
        # rebuilds its 4 MiB the other two stashes are still there (6 MiB). Recompute two.
        sol = solve(problem, 5 * MiB, RATES, exact_work=work, strategies=ALL)
        assert sol.plan_strings == ("Cast+:1:2",)
        assert sol.predicted_overhead_s == pytest.approx(16 * MS)


def test_freeze_round_trips_through_config() -> None:
    sol = solve(four_layers(), 8 * MiB, RATES, strategies=ALL)
    assert sol.freeze() == {"config": "A+:1:-1,B+:3:1", "sync": {0: (True, 2, False, 1)}}
    sol = solve(four_layers(), 16 * MiB, RATES, strategies=ALL)
    cfg = resolve_config(**sol.freeze())
    assert cfg.plan_strings() == ["A+:1:2"]


def test_only_allowed_strategies(monkeypatch) -> None:
    no_offload = {Strategy.KEEP, Strategy.RECOMPUTE, Strategy.COMPROMISE}
    sol = solve(four_layers(), 20 * MiB, RATES, strategies=no_offload)
    assert sol.plan_strings == ("A+:1:1",) and sol.sync == {} and sol.lead is None
    assert sol.predicted_overhead_s == pytest.approx(2 * MS)
    # By default the planner only emits what this build's plan strings accept.
    monkeypatch.setattr("memopt.plan.SUPPORTED_STRATEGIES", frozenset(no_offload))
    assert solve(four_layers(), 20 * MiB, RATES).plan_strings == ("A+:1:1",)
    monkeypatch.setattr("memopt.plan.SUPPORTED_STRATEGIES", ALL)
    assert solve(four_layers(), 20 * MiB, RATES).plan_strings == ("A+:3:1",)


def test_resolve_budget() -> None:
    problem = four_layers()
    assert resolve_budget(10 * MiB, problem) == 10 * MiB
    # peak 24 MiB minus (1 - 0.25) of the 24 MiB saved.
    assert resolve_budget(0.25, problem) == 6 * MiB
    assert resolve_budget(1.0, problem) == 24 * MiB
    with pytest.raises(ValueError):
        resolve_budget(1.5, problem)


# ---------------------------------------------------------------- against brute force


def brute_force(problem: PlanningProblem, budget: int, *, chains=None) -> float | None:
    """Fastest overhead over every expressible plan and lead, from the public evaluators;
    with ``chains`` (a :class:`memopt.planner.chains.Chains`), only plans that obey it."""
    index = {c.name: i for i, c in enumerate(problem.candidates)}
    best = None
    clusters = problem.clusters
    per_cluster = [
        [(Strategy.KEEP, 0)]
        + [(s, n) for s in list(Strategy)[1:] for n in range(1, len(cands) + 1)]
        for cands in clusters.values()
    ]
    for lead in default_leads(problem):
        windows = {} if lead is None else lead_windows(problem.timeline, lead)
        for combo in itertools.product(*per_cluster):
            decisions = {}
            for cands, (s, n) in zip(clusters.values(), combo):
                decisions.update({c.name: s for c in cands[:n]})
            rebuilt = {index[k]: s for k, s in decisions.items() if s in (1, 2)}
            if chains is not None and not chains.ok(rebuilt):
                continue
            try:
                peak = memory_profile(problem, decisions, windows).peak
            except ValueError:  # a strategy that does not apply
                continue
            if peak <= budget:
                t = step_time(problem, decisions, RATES, windows).overhead_s
                best = t if best is None else min(best, t)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_matchesbrute_force(seed: int) -> None:
    rng = random.Random(seed)
    n_layers, m = rng.randint(2, 4), rng.randint(2, 3)
    tensors = random_layer_tensors(rng, rng.randint(1, 2), m)
    problem = layered_problem(
        tensors, n_layers=n_layers, ops_per_layer=m, fwd_op_s=MS * rng.choice([1, 4, 16])
    )
    budget = resolve_budget(rng.choice([0.8, 0.5, 0.3]), problem)
    best = brute_force(problem, budget)
    for exact_work in (10**7, 0):
        sol = solve(problem, budget, RATES, exact_work=exact_work, strategies=ALL)
        assert sol.feasible == (best is not None)
        if best is None:
            continue
        assert sol.predicted_peak <= budget
        assert sol.predicted_overhead_s == pytest.approx(best, abs=1e-12)
        assert sol.overhead_lower_bound_s <= best + 1e-12


# ---------------------------------------------------------------- size


def test_two_thousand_candidates_under_two_seconds() -> None:
    tensors = random_layer_tensors(random.Random(0), 40, 25)
    problem = layered_problem(
        tensors, n_layers=50, ops_per_layer=25, fwd_op_s=2e-4, live_bytes=512 * MiB
    )
    assert len(problem.candidates) == 2000
    from memopt.planner import H100_DEFAULTS

    for fraction in (0.5, 0.2):
        budget = resolve_budget(fraction, problem)
        # The solve is deterministic; the best of three CPU times keeps a noisy neighbour on a
        # shared 2-core runner (seen: the same solve 0.37-0.62 s here) from failing the bar.
        times = []
        for _ in range(3):
            t0 = time.process_time()
            sol = solve(problem, budget, H100_DEFAULTS, strategies=ALL)
            times.append(time.process_time() - t0)
            if times[-1] < 2.0:
                break
        assert min(times) < 2.0, f"solve took {min(times):.2f} s (best of {len(times)})"
        assert sol.feasible and sol.predicted_peak <= budget
        assert sol.overhead_lower_bound_s <= sol.predicted_overhead_s


def test_a_compromise_only_candidate_is_never_planned_as_a_recompute():
    """A saved tensor whose subgraph rebuilds it only from a smaller cast input (compromise
    only) takes strategy 2, never 1: memopt.decide ignores strategy 1 there, so a plan that
    asked for it would be predicted recomputed and run kept. Nor does the step menu's
    "recompute all" fix its cluster to strategy 1."""
    from dataclasses import replace

    from memopt.planner import OpCost, solve
    from memopt.planner.synthetic import LayerTensor, layered_problem
    from memopt.step import recompute_all

    mib = 1 << 20
    ops = (OpCost(flops=1e9),)
    t = LayerTensor("C+", 10 * mib, slot=1, recompute_ops=ops, compromise_kept_bytes=2 * mib)
    p = layered_problem(
        [t], n_layers=2, ops_per_layer=3, fwd_op_s=1e-3, live_bytes=mib, static_bytes=4 * mib
    )
    assert solve(p, 0, RATES).plan_strings == ("C+:1:1",)  # as long as strategy 1 is there
    only = replace(p, candidates=tuple(replace(c, compromise_only=True) for c in p.candidates))
    sol = solve(only, 0, RATES)
    assert sol.plan_strings == ("C+:2:1",) and {int(s) for s in sol.decisions.values()} == {2}
    assert recompute_all(only) is None and recompute_all(p).fixed == {"C+": (1, -1)}


def test_descending_budgets_solve_again_only_where_the_last_answer_may_not_hold():
    """memopt.step.region_menu's shares: a feasible answer is reused while it fits, an
    infeasible one only at its proven lower bound; a looser budget is always solved."""
    from types import SimpleNamespace

    from memopt.planner.solver import descending

    answers = {  # budget -> (feasible, predicted peak, peak lower bound)
        100: (True, 60, 10),
        50: (True, 45, 10),
        45: (True, 45, 10),
        30: (False, 40, 35),
        20: (False, 35, 35),
        90: (True, 80, 10),
    }
    asked = []

    def solve_at(budget):
        asked.append(budget)
        f, peak, bound = answers[budget]
        return SimpleNamespace(feasible=f, predicted_peak=peak, peak_lower_bound=bound)

    at = descending(solve_at)
    peaks = [at(b).predicted_peak for b in (100, 80, 60, 50, 45, 30, 20, 10, 0, 90)]
    assert peaks == [60, 60, 60, 45, 45, 40, 35, 35, 35, 80]
    # 80 and 60: 100's plan (peak 60) fits; 45: 50's fits; 30: over 45, solved, infeasible above
    # its bound 35, so 20 is solved again; 20's answer is at its bound: 10 and 0 reuse it; 90 is
    # looser than the last budget: solved
    assert asked == [100, 50, 30, 20, 90]


def test_a_problem_solved_again_reuses_its_spaces_and_is_pickled_without_them() -> None:
    """A step menu solves one problem at many budgets: the spaces (and their enumerations) are
    made once per problem, the plans are those of a fresh problem, and the memo never travels
    with the problem (memopt.report_cache pickles it)."""
    import copy
    import pickle

    from memopt.planner import space as space_module

    problem = four_layers()
    made = []
    real = space_module.Space.__init__

    def counting(self, *a, **k):
        made.append(1)
        real(self, *a, **k)

    space_module.Space.__init__ = counting
    try:
        first = [solve(problem, b * MiB, RATES, strategies=ALL) for b in (20, 12, 8, 3)]
        n = len(made)
        again = [solve(problem, b * MiB, RATES, strategies=ALL) for b in (20, 12, 8, 3)]
        assert len(made) == n  # no space made again
        fresh = [solve(four_layers(), b * MiB, RATES, strategies=ALL) for b in (20, 12, 8, 3)]
    finally:
        space_module.Space.__init__ = real
    for a, b, c in zip(first, again, fresh):
        assert a.plan_strings == b.plan_strings == c.plan_strings
        assert a.predicted_peak == b.predicted_peak == c.predicted_peak
        assert a.predicted_overhead_s == b.predicted_overhead_s == c.predicted_overhead_s
    assert problem.memo
    for other in (pickle.loads(pickle.dumps(problem)), copy.deepcopy(problem)):
        assert "memo" not in vars(other) and other.memo == {}
        assert other.candidates == problem.candidates
