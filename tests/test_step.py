"""The step planner on plain data (memopt.step): exact peaks, choices and folds. Units: MiB."""

from __future__ import annotations

import pytest

from memopt.step import (
    Option,
    choose,
    fraction_target,
    pareto,
    step_overhead,
    step_peak,
)

MiB = 1 << 20


def opt(peak, saved, overhead=0.0, label=""):
    return Option(
        plans=(label,) if label else (),
        peak=peak * MiB,
        saved=saved * MiB,
        overhead_s=overhead,
        label=label,
    )


# a step: embedding (region 0), four runs of one layer graph (region 1), the head (region 2)
SEQ = (0, 1, 1, 1, 1, 2)
KEEP = {0: opt(10, 4), 1: opt(30, 20), 2: opt(50, 8)}


def test_step_peak_is_held_bytes_plus_the_running_region():
    peak, at = step_peak(SEQ, KEEP)
    # head runs while the embedding and four layers hold 4 + 4*20 = 84 MiB
    assert (peak, at) == (134 * MiB, 5)
    assert step_overhead(SEQ, {**KEEP, 1: opt(30, 20, 0.5)}) == pytest.approx(2.0)


def test_fraction_target_matches_the_one_region_rule():
    menus = {r: [o] for r, o in KEEP.items()}
    saved = 4 + 4 * 20 + 8
    assert fraction_target(0.5, SEQ, menus) == int(134 * MiB - 0.5 * saved * MiB)
    # one region: peak_keep - (1 - f) * saved_keep, as memopt.planner.resolve_budget
    assert fraction_target(0.4, (0,), {0: [opt(100, 60)]}) == int((100 - 0.6 * 60) * MiB)


def test_pareto_drops_dominated_options():
    a, b, c = opt(30, 20, 0.0, "a"), opt(25, 15, 1.0, "b"), opt(26, 16, 2.0, "c")
    assert pareto([c, b, a]) == (a, b)


def test_choose_spends_overhead_where_it_buys_most_step_peak():
    menus = {
        0: [opt(10, 4)],
        # the layer graph runs four times: each second of overhead costs 4 s per step
        1: [opt(30, 20, 0.0, "L-keep"), opt(26, 10, 1.0, "L-half"), opt(24, 2, 3.0, "L-min")],
        2: [opt(50, 8, 0.0, "H-keep"), opt(30, 8, 1.0, "H-small")],
    }
    # keep all: 134 MiB. Layers at half: 4 + 40 + 50 = 94 MiB for 4 s; head small: 114 MiB
    # for 1 s. A 100 MiB target needs the layers; 120 MiB needs only the head.
    c = choose(SEQ, menus, 100 * MiB)
    assert c.feasible and c.chosen[1].label == "L-half" and c.chosen[2].label == "H-keep"
    assert (c.peak, c.overhead_s) == (94 * MiB, pytest.approx(4.0))
    c = choose(SEQ, menus, 120 * MiB)
    assert c.chosen[1].label == "L-keep" and c.chosen[2].label == "H-small"
    assert c.peak == 114 * MiB and c.overhead_s == pytest.approx(1.0)
    assert (c.saved_before, c.saved_after) == (92 * MiB, 92 * MiB)


def test_choose_reports_the_smallest_peak_when_nothing_fits():
    menus = {0: [opt(10, 4)], 1: [opt(30, 20), opt(24, 2, 3.0, "L-min")], 2: [opt(50, 8)]}
    c = choose(SEQ, menus, 10 * MiB)
    assert not c.feasible
    assert c.chosen[1].label == "L-min" and c.peak == (4 + 4 * 2 + 50) * MiB


def test_one_region_takes_its_own_menu_entry():
    menus = {0: [opt(100, 60), opt(80, 40, 1.0, "a"), opt(70, 30, 2.0, "b")]}
    c = choose((0,), menus, 75 * MiB)
    assert c.chosen[0].label == "b" and c.peak == 70 * MiB


def test_choose_runs_plans_runs_of_one_graph_differently():
    from memopt.step import choose_runs

    menus = {
        0: [opt(10, 4)],
        1: [opt(30, 20, 0.0, "L-keep"), opt(26, 10, 1.0, "L-half")],
        2: [opt(50, 8)],
    }
    # all kept: 4 + 80 + 50 = 134 MiB; each layer run at half saves 10 MiB for 1 s. 115 MiB
    # needs two of the four runs at half (114 MiB, 2 s); one plan per region needs all four
    # (94 MiB, 4 s)
    c = choose_runs(SEQ, menus, 115 * MiB)
    assert c.feasible and c.peak == 114 * MiB and c.overhead_s == pytest.approx(2.0)
    assert sorted(o.label for i, o in c.chosen.items() if SEQ[i] == 1) == [
        "L-half",
        "L-half",
        "L-keep",
        "L-keep",
    ]
    assert choose(SEQ, menus, 115 * MiB).overhead_s == pytest.approx(4.0)


def test_limit_variants_moves_extra_plans_to_a_kept_harder_one():
    from memopt.step import MAX_VARIANTS, _limit_variants

    plans = [opt(30 - i, 20 - 2 * i, float(i), f"v{i}") for i in range(5)]
    seq = (1,) * 5
    out = _limit_variants(seq, dict(enumerate(plans)))
    assert len({o.label for o in out.values()}) == MAX_VARIANTS
    for i, o in out.items():  # every run saves at least as much as it did
        assert o.saved <= plans[i].saved and o.peak <= plans[i].peak


def test_finer_menus_spend_the_room_the_coarse_shares_left():
    """One region: the menu's option that fits a 95 MiB target peaks at 80 (room 15 MiB).
    The planner solved at 80 + 15 MiB finds a plan of 93 MiB for half the overhead; choosing
    again over the finer menu takes it. Without room the chosen option is solved again at
    its own peak (the menus are solved without the greedy's restarts:
    memopt.step.MENU_RESTARTS); when the choice does not fit, no finer menu."""
    from memopt.step import choose_runs, finer_menus

    menus = {0: [opt(100, 60), opt(80, 40, 2.0, "coarse")]}
    first = choose_runs((0,), menus, 95 * MiB)
    assert first.chosen[0].label == "coarse" and first.peak == 80 * MiB
    asked = []

    def solve_at(region, budget):
        asked.append((region, budget))
        return opt(93, 52, 1.0, "fine")

    finer = finer_menus((0,), menus, first, solve_at)
    assert asked == [(0, 95 * MiB)] and [o.label for o in finer[0]][-1] == "fine"
    again = choose_runs((0,), finer, 95 * MiB)
    assert again.chosen[0].label == "fine" and again.overhead_s == pytest.approx(1.0)
    asked.clear()
    tight = finer_menus((0,), menus, choose_runs((0,), menus, 80 * MiB), solve_at)
    assert asked == [(0, 80 * MiB)] and tight is not None
    assert finer_menus((0,), menus, choose_runs((0,), menus, 50 * MiB), solve_at) is None
