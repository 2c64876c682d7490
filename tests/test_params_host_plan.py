"""Sizing the host placement from measured rates: plain numbers, exact answers."""

from __future__ import annotations

import pytest

from memopt.params.host_plan import (
    choose_host_fraction,
    free_host_share,
    host_update_s,
    plan_host_groups,
    predicted_step_s,
    prefetch_depth,
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
