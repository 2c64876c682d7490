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


def test_each_copy_charges_its_ops_cpu_time() -> None:
    # The same plan as above with 0.5 ms of CPU per copy. T_0's offload op delays what follows
    # its producer (layer 0's op, ends at 2 ms) by 0.5 ms: T_0 is copied 2.5-6.5. T_1's op
    # (layer 1 ends at 3.5) delays by another 0.5 ms; the link is busy: copied 6.5-10.5.
    # Layer 2 would start at 4 ms and waits until 6.5 (2.5 ms, half a millisecond of it
    # already spent on the CPU); layer 3 would start at 7.5, waits until 10.5 (3 ms).
    from dataclasses import replace

    problem = four_layers()
    windows = lead_windows(problem.timeline, 2)
    decisions = {"T_0": Strategy.OFFLOAD, "T_1": Strategy.OFFLOAD}
    t = step_time(problem, decisions, replace(RATES, copy_op_s=0.5 * MS), windows)
    assert t.copy_ops_s == pytest.approx(1 * MS)  # two offloads (reloads are not charged)
    assert t.d2h_stall_s == pytest.approx(5.5 * MS)
    assert t.offload_s == pytest.approx(t.d2h_stall_s + t.h2d_stall_s + 1 * MS)
    assert t.overhead_s == pytest.approx(t.offload_s)
    # Without offload nothing is charged.
    none = step_time(problem, {}, replace(RATES, copy_op_s=0.5 * MS), windows)
    assert none.overhead_s == 0.0


def test_the_cpus_lead_absorbs_offload_ops() -> None:
    # The CPU gains 0.25 ms of lead per ms of forward. T_0's op (0.5 ms of CPU) comes after
    # 2 ms of forward: 0.5 ms of lead, all of it spent, no idle. T_1's op after 3 ms: 0.75 ms
    # of lead earned, 0.5 spent, 0.25 left: the GPU idles the other 0.25 ms.
    from dataclasses import replace

    problem = four_layers()
    windows = lead_windows(problem.timeline, 2)
    decisions = {"T_0": Strategy.OFFLOAD, "T_1": Strategy.OFFLOAD}
    rates = replace(RATES, copy_op_s=0.5 * MS, cpu_lead_gain=0.25)
    t = step_time(problem, decisions, rates, windows)
    assert t.copy_ops_s == pytest.approx(0.25 * MS)
    # T_0 copied 2-6, T_1 (op done at 3.25 ms) 6-10; layer 2 starts at 3.25 and waits 2.75
    # ms; layer 3 would start at 7, waits 3 ms.
    assert t.d2h_stall_s == pytest.approx(5.75 * MS)
