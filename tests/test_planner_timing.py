"""The roofline and the step simulation, in milliseconds (1 MiB copies take 1 ms)."""

from __future__ import annotations

import pytest

from memopt.plan import Strategy
from memopt.planner import DeviceRates, OpCost, lead_windows, ops_s, roofline_s, step_time
from memopt.planner.synthetic import LayerTensor, MiB, layered_problem
from memopt.planner.timing import simulate_step

MS = 1e-3
RATES = DeviceRates(
    name="test",
    matmul_flops_per_s=1e12,
    hbm_bytes_per_s=MiB / MS,
    h2d_bytes_per_s=MiB / MS,
    d2h_bytes_per_s=MiB / MS,
)


def test_roofline() -> None:
    assert roofline_s(OpCost(flops=2e9, bytes=MiB), RATES) == pytest.approx(2 * MS)  # matmul
    # A pointwise op is memory-bound, not free.
    assert roofline_s(OpCost(flops=1e6, bytes=3 * MiB), RATES) == pytest.approx(3 * MS)
    # Each op on its own roofline: 2 + 3 ms, not max(2.001, 4) ms.
    ops = (OpCost(flops=2e9, bytes=MiB), OpCost(flops=1e6, bytes=3 * MiB))
    assert ops_s(ops, RATES) == pytest.approx(5 * MS)


def four_layers():
    """Four 1-op layers, each saving a 4 MiB tensor; forward ops 1 ms, backward ops 2 ms.

    Forward: embed(0) L0(1) L1(2) L2(3) L3(4) loss(5); backward: loss'(0) L3(1) L2(2) L1(3)
    L0(4) embed'(5).
    """
    return layered_problem(
        [LayerTensor("T+", 4 * MiB, 0, (OpCost(bytes=MiB),))],
        n_layers=4,
        ops_per_layer=1,
        fwd_op_s=MS,
    )


def test_offload_copies_queue_on_one_link() -> None:
    problem = four_layers()
    windows = lead_windows(problem.timeline, 2)  # layers 0, 1
    decisions = {"T_0": Strategy.OFFLOAD, "T_1": Strategy.OFFLOAD}
    t = step_time(problem, decisions, RATES, windows)
    # T_0 made at 2 ms, copied 2-6; layer 2 starts at 3 ms and waits until 6 (3 ms).
    # T_1 made at 3 ms but the link is busy until 6: copied 6-10; layer 3 would start at
    # 7 ms, waits until 10 (3 ms). Forward ends at 12 ms.
    assert t.d2h_stall_s == pytest.approx(6 * MS)
    # Reload of layer 1 issued when layer 3's backward begins (14 ms): 14-18; of layer 0 when
    # layer 2's begins (16 ms), queued 18-22. T_1 is needed at 18 ms (no wait), T_0 at 20 ms:
    # 2 ms wait.
    assert t.h2d_stall_s == pytest.approx(2 * MS)
    assert t.overhead_s == pytest.approx(8 * MS)
    assert t.baseline_s == pytest.approx(18 * MS)
    assert t.total_s == pytest.approx(26 * MS)


def test_recompute_gives_reloads_room() -> None:
    problem = four_layers()
    windows = lead_windows(problem.timeline, 2)
    decisions = {"T_0": Strategy.OFFLOAD, "T_1": Strategy.OFFLOAD, "T_2": Strategy.RECOMPUTE}
    t = step_time(problem, decisions, RATES, windows)
    # T_2's 1 ms recompute runs after layer 0's reload is issued (16 ms, queued 18-22) and
    # before backward op 2: T_0 is needed at 21 ms instead of 20, the wait drops to 1 ms.
    assert t.recompute_s == pytest.approx(1 * MS)
    assert t.h2d_stall_s == pytest.approx(1 * MS)
    assert t.overhead_s == pytest.approx(8 * MS)


def test_simulate_step_directly() -> None:
    tl = four_layers().timeline
    # Made by op 1 (ends at 2 ms), freed before op 3 (3 ms): copy 2-6, 3 ms wait; forward
    # ends at 9 ms. Reloaded before position 8 (13 ms): 13-17; used at position 9 (15 ms).
    items = [("T_0", 4 * MiB, 1, 3, 8, 9)]
    t = simulate_step(tl, RATES, {}, items)
    assert (t.d2h_stall_s, t.h2d_stall_s) == (pytest.approx(3 * MS), pytest.approx(2 * MS))
    # 4 ms of recompute before that use hides the copy completely.
    t = simulate_step(tl, RATES, {9: 4 * MS}, items)
    assert t.h2d_stall_s == 0.0 and t.recompute_s == pytest.approx(4 * MS)


def test_keep_costs_nothing() -> None:
    problem = four_layers()
    t = step_time(problem, {}, RATES)
    assert t.overhead_s == 0.0
    with pytest.raises(ValueError, match="window"):
        step_time(problem, {"T_3": Strategy.OFFLOAD}, RATES, lead_windows(problem.timeline, 1))
