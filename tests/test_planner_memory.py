"""Liveness and peak of the planner's memory model, on a hand-built two-layer step.

Step: 4 forward ops, 4 backward ops (positions 0..7), 1 MiB of other memory everywhere.
Layer 0 runs forward ops 0-1 and backward ops 2-3; layer 1 forward 2-3, backward 0-1.
X (4 MiB, layer 0) is made by forward op 0, read again by op 1, first read in the backward by
backward op 2 (position 6) and last by backward op 3 (position 7).
"""

from __future__ import annotations

import pytest

from memopt.plan import Strategy
from memopt.planner import (
    Candidate,
    PlanningProblem,
    StepTimeline,
    lead_windows,
    memory_profile,
    saved_bytes,
)
from memopt.planner.memory import intervals, offload_valid

MiB = 1 << 20

TIMELINE = StepTimeline(
    fwd_op_s=(1e-3,) * 4,
    bwd_op_s=(2e-3,) * 4,
    fwd_live_bytes=(MiB,) * 4,
    bwd_live_bytes=(MiB,) * 4,
    layer_fwd_start=(0, 2),
    layer_bwd_start=(2, 0),
)
X = Candidate(
    name="x",
    cluster_id="Gelu+",
    occurrence=0,
    layer=0,
    nbytes=4 * MiB,
    produce_pos=0,
    last_fwd_use_pos=1,
    first_bwd_use_pos=2,
    last_bwd_use_pos=3,
    recomputable=True,
    recompute_temp_bytes=MiB,
    compromise_kept_bytes=MiB,
    offloadable=True,
)
PROBLEM = PlanningProblem(candidates=(X,), timeline=TIMELINE)
WINDOWS = lead_windows(TIMELINE, 1)  # layer 0: freed before position 2, back at position 4


def curve_mib(strategy: Strategy) -> list[float]:
    prof = memory_profile(PROBLEM, {"x": strategy}, WINDOWS)
    return [v / MiB for v in prof.curve]


def test_windows_of_lead_one() -> None:
    assert WINDOWS[0].release_pos == 2 and WINDOWS[0].reload_pos == 4
    assert 1 not in WINDOWS  # the last layer has nothing to hide behind


@pytest.mark.parametrize(
    ("strategy", "curve"),
    [
        (Strategy.KEEP, [5, 5, 5, 5, 5, 5, 5, 5]),
        # live while the forward still reads it, again from its first backward use; the
        # recompute's intermediates (1 MiB) at that use
        (Strategy.RECOMPUTE, [5, 5, 1, 1, 1, 1, 6, 5]),
        # plus the 1 MiB stash from production to the first backward use
        (Strategy.COMPROMISE, [6, 6, 2, 2, 2, 2, 6, 5]),
        # gone between its layer's release and reload positions
        (Strategy.OFFLOAD, [5, 5, 1, 1, 5, 5, 5, 5]),
    ],
)
def test_curve_per_strategy(strategy: Strategy, curve: list[int]) -> None:
    assert curve_mib(strategy) == curve


def test_peak_and_phase() -> None:
    prof = memory_profile(PROBLEM, {"x": Strategy.RECOMPUTE}, WINDOWS)
    assert prof.peak == 6 * MiB and prof.peak_pos == 6 and prof.peak_phase == "backward"
    prof = memory_profile(PROBLEM, {"x": Strategy.COMPROMISE}, WINDOWS)
    assert prof.peak == 6 * MiB and prof.peak_pos == 0 and prof.peak_phase == "forward"


def test_static_bytes_add_everywhere() -> None:
    tl = StepTimeline(
        fwd_op_s=(1e-3,) * 4,
        bwd_op_s=(2e-3,) * 4,
        fwd_live_bytes=(0,) * 4,
        bwd_live_bytes=(0,) * 4,
        static_bytes=10 * MiB,
    )
    x = Candidate(**{**X.__dict__, "layer": None})
    prob = PlanningProblem(candidates=(x,), timeline=tl)
    assert memory_profile(prob, {}).curve == (14 * MiB,) * 8


def test_saved_bytes_per_strategy() -> None:
    assert saved_bytes(PROBLEM, {}).on_device == 4 * MiB
    assert saved_bytes(PROBLEM, {"x": Strategy.RECOMPUTE}).total == 0
    assert saved_bytes(PROBLEM, {"x": Strategy.COMPROMISE}).on_device == MiB
    s = saved_bytes(PROBLEM, {"x": Strategy.OFFLOAD})
    assert (s.on_device, s.offloaded) == (0, 4 * MiB)


def test_offload_needs_a_valid_window() -> None:
    assert offload_valid(X, WINDOWS[0], TIMELINE.n_fwd)
    late_reader = Candidate(**{**X.__dict__, "name": "y", "last_fwd_use_pos": 2})
    assert not offload_valid(late_reader, WINDOWS[0], TIMELINE.n_fwd)  # read after release
    assert not offload_valid(X, None, TIMELINE.n_fwd)
    with pytest.raises(ValueError, match="does not apply"):
        memory_profile(PROBLEM, {"x": Strategy.OFFLOAD}, {})
    with pytest.raises(ValueError, match="needs its layer's window"):
        intervals(X, Strategy.OFFLOAD, TIMELINE.n_fwd)


def test_strategies_that_do_not_apply() -> None:
    plain = Candidate(**{**X.__dict__, "recomputable": False, "offloadable": False})
    prob = PlanningProblem(candidates=(plain,), timeline=TIMELINE)
    for s in (Strategy.RECOMPUTE, Strategy.COMPROMISE, Strategy.OFFLOAD):
        with pytest.raises(ValueError, match="does not apply"):
            memory_profile(prob, {"x": s}, WINDOWS)


def test_problem_validation() -> None:
    with pytest.raises(ValueError, match="not unique"):
        PlanningProblem(candidates=(X, X), timeline=TIMELINE)
    bad = Candidate(**{**X.__dict__, "first_bwd_use_pos": 9})
    with pytest.raises(ValueError, match="backward positions"):
        PlanningProblem(candidates=(bad,), timeline=TIMELINE)
    with pytest.raises(ValueError, match="layer starts"):
        StepTimeline(
            fwd_op_s=(1.0,) * 4,
            bwd_op_s=(1.0,) * 4,
            fwd_live_bytes=(0,) * 4,
            bwd_live_bytes=(0,) * 4,
            layer_fwd_start=(2, 0),
            layer_bwd_start=(0, 2),
        )


def test_kept_by_chain_makes_recompute_act_as_keep() -> None:
    # decide() keeps a covered candidate whose recompute would chain: the planner must predict
    # keep for it (curve, saved bytes, no recompute seconds); offload is unaffected
    from dataclasses import replace

    from memopt.planner import H100_DEFAULTS, OpCost
    from memopt.planner.timing import recompute_s, step_time

    costly = replace(X, recompute_ops=(OpCost(flops=6e9),))  # 10 us at 600 TFLOP/s
    assert recompute_s(costly, Strategy.RECOMPUTE, H100_DEFAULTS) == pytest.approx(1e-5)
    kept = replace(costly, kept_by_chain=True)
    prob = PlanningProblem(candidates=(kept,), timeline=TIMELINE)
    for s in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
        assert [v / MiB for v in memory_profile(prob, {"x": s}, WINDOWS).curve] == [5] * 8
        assert saved_bytes(prob, {"x": s}).on_device == 4 * MiB
        assert recompute_s(kept, s, H100_DEFAULTS) == 0.0
        assert step_time(prob, {"x": s}, H100_DEFAULTS).overhead_s == 0.0
    off = memory_profile(prob, {"x": Strategy.OFFLOAD}, WINDOWS).curve
    assert [v / MiB for v in off] == [5, 5, 1, 1, 5, 5, 5, 5]
