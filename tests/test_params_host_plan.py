"""Sizing the host placement from measured rates: plain numbers, exact answers."""

from __future__ import annotations

import pytest

from memopt.params.host_plan import (
    choose_host_fraction,
    choose_placement,
    free_host_share,
    grow_host_plan,
    host_update_s,
    plan_host_groups,
    predicted_step_s,
    prefetch_depth,
    share_for_budget,
    transfer_s,
)

MB = 1_000_000


def test_prefetch_depth_hides_the_copy_of_the_largest_group():
    # 180 MB per group at 50 GB/s = 3.6 ms of copy
    assert prefetch_depth([180 * MB] * 4, 50e9, 0.004) == 1  # 4 ms of compute per group
    assert prefetch_depth([180 * MB] * 4, 50e9, 0.002) == 2  # 1.8 groups
    assert prefetch_depth([180 * MB] * 4, 50e9, 0.0012) == 3  # exactly 3 groups
    assert prefetch_depth([180 * MB] * 4, 50e9, 0.0001) == 4  # capped at limit
    assert prefetch_depth([], 50e9, 0.001) == 1
    with pytest.raises(ValueError, match="> 0"):
        prefetch_depth([MB], 0.0, 0.001)


def test_host_update_and_free_share_use_28_bytes_per_fp32_parameter():
    # 1e9 fp32 params = 4e9 bytes -> 28e9 bytes of traffic; at 80 GB/s that is 0.35 s
    assert host_update_s(4_000_000_000, 80e9) == pytest.approx(0.35, abs=1e-12)
    # a 0.14 s device step hides 0.14 * 80e9 / 7 = 1.6e9 parameter bytes of 4e9: 40 %
    assert free_host_share(4_000_000_000, 0.14, 80e9) == pytest.approx(0.4, abs=1e-12)
    assert free_host_share(4_000_000_000, 10.0, 80e9) == 1.0
    assert free_host_share(0, 0.14, 80e9) == 0.0


def test_choose_host_fraction_takes_what_memory_needs_or_what_is_free():
    assert choose_host_fraction(0.9, 4_000_000_000, 0.14, 80e9) == 0.9  # memory decides
    assert choose_host_fraction(0.1, 4_000_000_000, 0.14, 80e9) == pytest.approx(0.4, abs=1e-12)
    with pytest.raises(ValueError, match="must be in"):
        choose_host_fraction(1.5, 4_000_000_000, 0.14, 80e9)


def test_predicted_step_is_the_longer_of_device_step_and_host_update():
    names, sizes = ["l0", "l1", "l2", "l3", ""], [700 * MB] * 4 + [1_200 * MB]
    every = plan_host_groups(names, sizes, 1.0)  # 4e9 bytes: 0.35 s of CPU at 80 GB/s
    assert predicted_step_s(every, 0.14, 80e9) == pytest.approx(0.35, abs=1e-12)
    half = plan_host_groups(names, sizes, 0.3)  # two layers: 1.4e9 bytes -> 0.1225 s
    assert half.host_bytes == 1_400 * MB
    assert predicted_step_s(half, 0.14, 80e9) == 0.14


def test_transfer_counts_two_gathers_and_one_gradient_copy_in_parallel():
    # 1e9 host bytes: 2e9 B H2D at 50 GB/s = 40 ms; 1e9 B D2H at 40 GB/s = 25 ms, beside it
    assert transfer_s(1e9, 50e9, 40e9) == pytest.approx(0.04, abs=1e-12)
    assert transfer_s(1e9, 50e9, 10e9) == pytest.approx(0.1, abs=1e-12)
    assert transfer_s(1e9) == 0.0  # no device: nothing to copy
    # PCIe limits the free share below the update's: 0.14 s of step copies 0.14 / (2 / 50e9)
    # = 3.5e9 bytes at most; the update hides 1.6e9 of them
    assert free_host_share(4e9, 0.14, 80e9, h2d_Bps=50e9, d2h_Bps=40e9) == pytest.approx(0.4)
    # at 10 GB/s H2D: 0.14 * 10e9 / 2 = 0.7e9 bytes, 17.5 %
    share = free_host_share(4e9, 0.14, 80e9, h2d_Bps=10e9, d2h_Bps=40e9)
    assert share == pytest.approx(0.175, abs=1e-12)


def test_share_for_budget_keeps_at_most_the_budget_on_the_device():
    assert share_for_budget(4 * MB, 1 * MB) == 0.75
    assert share_for_budget(4 * MB, 8 * MB) == 0.0
    assert share_for_budget(4 * MB, 0) == 1.0
    assert share_for_budget(0, MB) == 0.0


def test_grow_host_plan_keeps_host_groups_and_spreads_the_new_ones():
    names, sizes = [f"l{i}" for i in range(6)] + [""], [100] * 6 + [50]
    start = plan_host_groups(names, sizes, 0.3)  # 2 layers: 0 and 3
    assert start.on_host == (True, False, False, True, False, False, False)
    grown = grow_host_plan(start, 0.6)  # 390 of 650 B: two more of l1, l2, l4, l5
    assert grown.on_host == (True, True, False, True, True, False, False)
    assert grown.host_bytes == 400
    assert grow_host_plan(start, 0.2) == start  # already enough: nothing moves
    every = grow_host_plan(start, 0.95)  # 617.5 B: all layers (600) and the root
    assert every.on_host == (True,) * 7


def test_choose_placement_from_rates_exact():
    # 20 layers of 200 MB + a 400 MB root = 4.4e9 B at world size 2: 2.2e9 B per rank
    names, sizes = [f"l{i}" for i in range(20)] + [""], [200 * MB] * 20 + [400 * MB]
    start = plan_host_groups(names, sizes, 0.0)
    # a 0.3 s step hides 0.3 * 70e9 / 7 = 3e9 B of update: more than the rank's 2.2e9; the
    # copies allow 0.3 * 25e9 / 2 = 3.75e9 B: everything goes to the host
    plan, c = choose_placement(start, 0.0, 0.3, adam_Bps=70e9, h2d_Bps=25e9, d2h_Bps=25e9, world=2)
    assert plan.on_host == (True,) * 21 and c.free_share == 1.0 and c.fraction == 1.0
    # host update 2.2e9 * 7 / 70e9 = 0.22 s; copies 2 * 2.2e9 / 25e9 = 0.176 s; step 0.3 s
    assert c.host_update_s == pytest.approx(0.22) and c.transfer_s == pytest.approx(0.176)
    assert c.predicted_step_s == 0.3
    # one layer's forward 0.3 / 3 / 20 = 5 ms; a layer's 100 MB shard copies in 4 ms: depth 1
    assert c.prefetch == 1
    # a 0.1 s step: the update hides 1e9 B (45.45 % of 2.2e9), the copies 1.25e9: 10 layers
    plan, c = choose_placement(start, 0.0, 0.1, adam_Bps=70e9, h2d_Bps=25e9, d2h_Bps=25e9, world=2)
    assert c.free_share == pytest.approx(1e9 / 2.2e9)
    assert (
        plan.host_groups == tuple(f"l{i}" for i in range(0, 20, 2)) and c.host_share == 0.5 - 1 / 22
    )
    # layer forward 0.1 / 60 = 1.67 ms; 100 MB copies in 4 ms: 3 groups ahead
    assert c.prefetch == 3
    assert c.predicted_step_s == pytest.approx(0.1)
    # memory needs 80 % (3.52e9 B): 18 layers; more than is free, the step becomes CPU bound
    plan, c = choose_placement(start, 0.8, 0.1, adam_Bps=70e9, h2d_Bps=25e9, d2h_Bps=25e9, world=2)
    assert c.fraction == 0.8 and plan.host_bytes == 18 * 200 * MB
    assert c.predicted_step_s == pytest.approx(1.8e9 * 7 / 70e9)  # 0.18 s of host update
