"""The step's proven lower bound on overhead (memopt.step_bounds): exact on a step worked out by
hand, never above a step plan that fits (menus of random regions, one plan per region and one
per run), and infinite exactly where nothing can fit."""

from __future__ import annotations

import math
import random

import pytest

from memopt.plan import Strategy
from memopt.planner.problem import OpCost
from memopt.planner.space import Space
from memopt.planner.synthetic import LayerTensor, MiB, layered_problem, random_layer_tensors
from memopt.step import choose_runs, region_menu, step_peak
from memopt.step_bounds import step_bound
from tests.test_planner_solver import RATES

A = LayerTensor("A+", 4 * MiB, 0, (OpCost(flops=1e9, bytes=2 * MiB),))
B = LayerTensor("B+", 2 * MiB, 1, (OpCost(flops=8e9, bytes=MiB),))


def _layer():
    return layered_problem([A, B], n_layers=1, ops_per_layer=2, fwd_op_s=1e-3)


def _costs(problem) -> dict[str, float]:
    sp = Space(problem, RATES, None, strategies={Strategy.KEEP, Strategy.RECOMPUTE})
    return {cs.cid: cs.rprefix[Strategy.RECOMPUTE][1] for cs in sp.clusters}


def test_three_runs_of_one_layer_by_hand():
    """Three runs of a layer that saves A (4 MiB, cheap per byte) and B (2 MiB): each holds
    6 MiB into its backward and peaks at 6 MiB. At a 12 MiB target the third run must find
    6 MiB: the LP takes one and a half A's, at 1.5x A's recompute (the best real plan
    recomputes A in two runs: 2x)."""
    p = _layer()
    cost = _costs(p)
    assert cost["A+"] / 4 < cost["B+"] / 2  # A is the cheaper byte
    regions = {0: (p, RATES, 0)}
    b = step_bound([0, 0, 0], regions, 12 * MiB)
    assert b.at == 2 and b.overhead_s == pytest.approx(1.5 * cost["A+"], rel=1e-12)
    # 2 MiB outside the regions while the third run runs: 8 MiB to find, two A's
    b = step_bound([0, 0, 0], regions, 12 * MiB, offsets=[0, 0, 2 * MiB])
    assert b.overhead_s == pytest.approx(2 * cost["A+"], rel=1e-12)
    # nothing to find: no overhead. Below 4 MiB nothing fits: A is live as it is made
    assert step_bound([0, 0, 0], regions, 18 * MiB).overhead_s == 0.0
    assert step_bound([0, 0, 0], regions, 18 * MiB).at is None
    assert math.isinf(step_bound([0, 0, 0], regions, 4 * MiB - 1).overhead_s)
    assert step_bound([0, 0, 0], regions, 4 * MiB).overhead_s < math.inf
    menus = {0: region_menu(p, RATES)}
    real = choose_runs([0, 0, 0], menus, 12 * MiB)
    assert real.feasible and real.overhead_s == pytest.approx(2 * cost["A+"], rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_no_step_plan_that_fits_costs_less_than_the_bound(seed):
    """Random regions (two to three, each one to three layers) in a random step: at targets
    from the unplanned peak down to below the smallest, every fitting plan (one per region,
    one per run) costs at least the bound; where the bound is infinite nothing fits. The
    menus offload inside regions (sync dicts; 70% of the tensors are offloadable): with
    offload left out of the bound, seeds 0, 3 and 5 had plans below it."""
    rng = random.Random(seed)
    problems = {}
    for r in range(rng.randint(2, 3)):
        m = rng.randint(2, 4)
        tensors = random_layer_tensors(rng, rng.randint(2, 4), m)
        problems[r] = layered_problem(
            tensors, n_layers=rng.randint(1, 3), ops_per_layer=m, fwd_op_s=2e-4,
            live_bytes=rng.randint(0, 8) * MiB,
        )  # fmt: skip
    sequence = [rng.randrange(len(problems)) for _ in range(rng.randint(2, 6))]
    menus = {r: region_menu(problems[r], RATES) for r in set(sequence)}
    assert any(o.sync for m in menus.values() for o in m) == (seed in (0, 3, 5))
    keep = {r: menus[r][0] for r in menus}
    top = step_peak(sequence, keep)[0]
    regions = {r: (problems[r], RATES, 0) for r in problems}
    fits = 0
    for share in (1.0, 0.9, 0.75, 0.6, 0.45, 0.3, 0.15):
        target = int(share * top)
        bound = step_bound(sequence, regions, target)
        c = choose_runs(sequence, menus, target)  # never worse than one plan per region
        if c.feasible:
            fits += 1
            assert bound.overhead_s <= c.overhead_s * (1 + 1e-9) + 1e-15, share
        if c.feasible and seed in (1, 4):  # menus without offload: at least 0.55x the plan
            assert bound.overhead_s >= 0.55 * c.overhead_s, share
        if math.isinf(bound.overhead_s):
            assert not choose_runs(sequence, menus, target).feasible
    assert fits >= 2  # the check ran
