"""The step plan's exact choice over the regions' menus (memopt.step_exact): equal to a brute
force over every per-run assignment, and on the menus an FSDP2 Llama's step produced on an H200
below the greedy descent's answer."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest

from memopt.step import Option, choose_runs, pareto, step_overhead, step_peak
from memopt.step_exact import MAX_STATES, exact_runs

ROOT = Path(__file__).resolve().parents[1]


def _menu(rng: random.Random, n: int) -> list[Option]:
    out = [Option(plans=(), peak=rng.randint(50, 100), saved=rng.randint(50, 100))]
    for k in range(n - 1):
        out.append(
            Option(
                plans=(f"P{k}:1:-1",),
                peak=rng.randint(20, 100),
                saved=rng.randint(0, 80),
                overhead_s=rng.uniform(0.1, 3.0),
            )
        )
    return out


def _brute(sequence, menus, target, offsets, away=None):
    best = None
    for combo in itertools.product(*(menus[r] for r in sequence)):
        chosen = dict(enumerate(combo))
        if step_peak(range(len(sequence)), chosen, offsets, away)[0] > target:
            continue
        cost = sum(o.overhead_s for o in combo)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_exact_runs_is_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    regions = rng.randint(1, 3)
    menus = {r: _menu(rng, rng.randint(2, 4)) for r in range(regions)}
    sequence = [rng.randrange(regions) for _ in range(rng.randint(2, 5))]
    offsets = [rng.randint(0, 30) for _ in sequence]
    target = rng.randint(150, 400)  # under MAX_STATES: one byte a bucket, exact
    assert target < MAX_STATES
    want = _brute(sequence, menus, target, offsets)
    got = exact_runs(sequence, {r: pareto(m) for r, m in menus.items()}, target, offsets)
    if want is None:
        assert got is None
        return
    assert got is not None and set(got) == set(range(len(sequence)))
    assert step_peak(range(len(sequence)), got, offsets)[0] <= target
    assert sum(o.overhead_s for o in got.values()) == pytest.approx(want, abs=1e-12)


def test_large_targets_keep_the_state_count_bounded_and_still_fit():
    rng = random.Random(7)
    scale = 10**7  # bytes of a real step: a bucket is many bytes
    menus = {0: [Option(plans=o.plans, peak=o.peak * scale, saved=o.saved * scale,
                        overhead_s=o.overhead_s) for o in _menu(rng, 12)]}  # fmt: skip
    sequence = [0] * 16
    target = 900 * scale
    got = exact_runs(sequence, {0: pareto(menus[0])}, target)
    assert got is not None
    assert step_peak(range(16), got)[0] <= target


def test_the_fsdp2_step_on_an_h200_gets_the_optimum_the_descent_missed():
    """The first step plan of benchmarks/multi_gpu.py's 8-layer FSDP2 Llama at torch 0.5's
    peak (docs/data/step_choice_s29.json, recorded by benchmarks/diag_step_choice.py before
    this solver): the descent chose 1.160 ms of predicted overhead; 1.067 ms fits."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from diag_step_choice import load

    call = load(ROOT / "docs" / "data" / "step_choice_s29.json")[0]
    seq, menus, target, offsets = call["sequence"], call["menus"], call["target"], call["offsets"]
    old = call["choice"]
    assert round(old["overhead_s"] * 1e6) == 1160 and old["feasible"]
    got = choose_runs(seq, menus, target, offsets)
    assert got.feasible and got.peak <= target
    assert round(got.overhead_s * 1e6) == 1067
    assert step_overhead(range(len(seq)), got.chosen) == got.overhead_s
    variants = {o.key() for i, o in got.chosen.items() if seq[i] == 0}
    assert len(variants) <= 3  # the layer region compiles at most MAX_VARIANTS plans


@pytest.mark.parametrize("seed", range(30))
def test_exact_runs_with_offloaded_runs_is_the_brute_force_optimum(seed):
    """Runs offloaded across the step (``away``): an offloaded run's option sets the bytes it
    moves off the later runs, so the optimum can keep more in it than without offload."""
    rng = random.Random(100 + seed)
    regions = rng.randint(1, 2)
    menus = {r: _menu(rng, rng.randint(2, 4)) for r in range(regions)}
    n = rng.randint(3, 5)
    sequence = [rng.randrange(regions) for _ in range(n)]
    offsets = [rng.randint(0, 30) for _ in sequence]
    gone = frozenset(range(rng.randint(1, 2)))  # the first runs, as the first layers
    away = {i: gone for i in range(max(gone) + 2, n)}
    target = rng.randint(150, 350)
    want = _brute(sequence, menus, target, offsets, away)
    got = exact_runs(sequence, {r: pareto(m) for r, m in menus.items()}, target, offsets, away)
    if want is None:
        assert got is None
        return
    assert got is not None and step_peak(range(n), got, offsets, away)[0] <= target
    assert sum(o.overhead_s for o in got.values()) == pytest.approx(want, abs=1e-12)


def test_an_offloaded_run_keeps_what_it_moves_to_the_host():
    """Offloading run 0 frees its saved bytes for runs 2-3: the exact choice keeps everything
    in run 0 (the host holds it) and recomputes in one later run (its bytes: 100 + 20 + 50 at
    run 3, of 180); without the offload three runs must recompute."""
    keep = Option(plans=(), peak=50, saved=100)
    cut = Option(plans=("P:1:-1",), peak=50, saved=20, overhead_s=1.0)
    menus = {0: [keep, cut]}
    away = {2: frozenset({0}), 3: frozenset({0})}
    got = choose_runs([0, 0, 0, 0], menus, 180, None, away)
    assert got.feasible and got.peak <= 180
    assert got.chosen[0] == keep
    assert round(got.overhead_s, 9) == 1.0
    assert round(choose_runs([0, 0, 0, 0], menus, 180).overhead_s, 9) == 3.0


def test_the_fsdp2_step_with_a_layer_offloaded_gets_the_optimum_held_to_three_plans():
    """The twenty-ninth session's recorded FSDP2 step (H200, ``offload_layers="auto"``,
    ``docs/data/step_choice_auto_s29.json``) with layer 0 offloaded: the descent's answer
    (4.899 ms) used more than three plans for the layer region, and held to three it cost
    5.255 ms; the exact choice over sets of three of the optimum's plans costs 4.909 ms."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from diag_step_choice import load

    from memopt.step import MAX_VARIANTS, _limit_variants, choose
    from memopt.step_layers import StepTiming, offload_choice, offload_times

    call = load(ROOT / "docs" / "data" / "step_choice_auto_s29.json")[2]
    seq, menus, target, offsets = call["sequence"], call["menus"], call["target"], call["offsets"]
    n, timing = len(seq), StepTiming(**call["timing"])
    off = offload_choice(call["layers"], 1, n)
    most = {j: max(o.movable for o in menus[seq[j]]) for j in off.runs}
    off = offload_choice(call["layers"], 1, n, offload_times(off, most, timing)[1])
    descent = choose(range(n), {i: menus[r] for i, r in enumerate(seq)}, target, offsets, off.away)
    assert round(descent.overhead_s * 1e6) == 4899
    held = _limit_variants(seq, dict(descent.chosen))
    assert round(sum(o.overhead_s for o in held.values()) * 1e6) == 5255
    got = choose_runs(seq, menus, target, offsets, off.away)
    assert got.feasible and step_peak(range(n), got.chosen, offsets, off.away)[0] <= target
    assert round(got.overhead_s * 1e6) == 4909
    assert len({o.key() for i, o in got.chosen.items() if seq[i] == 0}) <= MAX_VARIANTS
