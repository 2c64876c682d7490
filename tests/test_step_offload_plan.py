"""The step planner's own offload choice on plain data (memopt.step_layers, memopt.step): which
runs are on the host while each run runs, what the copy-back costs, and when offloading the
first layers beats recomputing. Units: MiB and seconds."""

from __future__ import annotations

import json

import pytest

from memopt.step import Option, choose_with_offload, step_peak
from memopt.step_layers import (
    StepTiming,
    kept_tensors,
    layer_runs,
    offload_choice,
    offload_overhead,
    offload_times,
)
from tests.test_step import SEQ, opt

MiB = 1 << 20

# SEQ: embedding (run 0), four runs of one layer graph (runs 1-4), the head (run 5)
LAYERS = layer_runs(SEQ)


def test_offload_choice_says_which_runs_are_away_while_each_runs():
    assert LAYERS == [[1], [2], [3], [4]]
    one = offload_choice(LAYERS, 1, len(SEQ))
    # layer 0 comes back when layer 2's backward (run 3) begins: away in runs 4 and 5 only
    assert one.runs == (1,) and dict(one.reload_at) == {3: (1,)}
    assert dict(one.away) == {4: frozenset({1}), 5: frozenset({1})}
    two = offload_choice(LAYERS, 2, len(SEQ))
    assert two.runs == (1, 2) and dict(two.reload_at) == {2: (1,), 3: (2,)}
    assert dict(two.away) == {3: {1}, 4: {1, 2}, 5: {1, 2}}


def test_step_peak_leaves_out_what_is_on_the_host():
    per_run = {0: opt(10, 4), **{i: opt(30, 20) for i in range(1, 5)}, 5: opt(50, 8)}
    assert step_peak(range(6), per_run) == (134 * MiB, 5)
    away = offload_choice(LAYERS, 1, 6).away
    assert step_peak(range(6), per_run, None, away) == ((134 - 20) * MiB, 5)
    # a run's saved graph inputs (the previous layer's output) stay: they are its call's inputs
    with_input = {
        **per_run,
        1: Option(plans=(), peak=30 * MiB, saved=20 * MiB, saved_inputs=5 * MiB),
    }
    assert step_peak(range(6), with_input, None, away) == ((134 - 15) * MiB, 5)
    away2 = offload_choice(LAYERS, 2, 6).away
    assert step_peak(range(6), per_run, None, away2) == ((134 - 40) * MiB, 5)


def test_offload_overhead_is_the_copy_back_the_backward_cannot_hide():
    one = offload_choice(LAYERS, 1, 6)
    # backward starts (s after the backward began): run 5 at 0, 4 at 1, 3 at 2, 2 at 3, 1 at 4
    fast = StepTiming(bwd_s=[1.0] * 6, h2d_bytes_per_s=10 * MiB, cpu_s_per_run=0.1)
    # 20 MiB take 2 s from run 3's start (2 s): back at 4 s, just as run 1's backward needs it
    assert offload_overhead(one, {1: 20 * MiB}, fast) == pytest.approx(0.1)
    slow = StepTiming(bwd_s=[1.0] * 6, h2d_bytes_per_s=4 * MiB, cpu_s_per_run=0.1)
    # 5 s: back at 7 s, 3 s late
    assert offload_overhead(one, {1: 20 * MiB}, slow) == pytest.approx(3.1)
    two = offload_choice(LAYERS, 2, 6)
    # one transfer stream: layer 1's copy (from 2 s) ends at 7 s: run 2 (at 3 s) waits 4 s;
    # layer 0's copy, issued at run 2's start, follows it and ends at 12 s: run 1, at 8 s
    # after the first wait, waits 4 s more
    assert offload_overhead(two, {1: 20 * MiB, 2: 20 * MiB}, slow) == pytest.approx(8.2)


def test_an_offloaded_runs_cpu_time_counts_the_tensors_its_plan_keeps():
    """The forward-thread time per offloaded run is a base plus a time per tensor it copies:
    the tensors its plan keeps of those at least ``offload_min_bytes`` (a recomputed or
    in-region offloaded tensor is not copied; a compromise keeps one)."""
    from memopt.plan import Strategy

    names = frozenset({"a", "b", "c", "d"})
    assert kept_tensors({}, names) == 4
    plan = {"a": Strategy.RECOMPUTE, "b": Strategy.OFFLOAD, "c": Strategy.COMPROMISE, "x": 1}
    assert kept_tensors(plan, names) == 2
    assert kept_tensors({"a": 1, "b": 3, "c": 2}, names) == 2  # decisions read back as ints
    one = offload_choice(LAYERS, 1, 6)
    t = StepTiming(bwd_s=[1.0] * 6, h2d_bytes_per_s=100 * MiB, cpu_s_per_run=0.1,
                   cpu_s_per_tensor=0.01, tensors={1: names})  # fmt: skip
    assert offload_overhead(one, {1: MiB}, t) == pytest.approx(0.1 + 4 * 0.01)
    assert offload_overhead(one, {1: MiB}, t, {1: 2}) == pytest.approx(0.1 + 2 * 0.01)


MENUS = {
    0: [opt(10, 4)],
    1: [opt(30, 20, 0.0, "keep"), opt(26, 10, 1.0, "half")],
    2: [opt(50, 8)],
}


def test_the_step_offloads_when_the_copy_hides_and_recomputes_when_it_does_not():
    target = 114 * MiB
    # recompute alone: two of the four layer runs at half (4 + 2*20 + 2*10 + 50 = 114), 2 s
    fast = StepTiming(bwd_s=[1.0] * 6, h2d_bytes_per_s=10 * MiB, cpu_s_per_run=0.1)
    c = choose_with_offload(SEQ, MENUS, target, None, LAYERS, fast)
    assert c.feasible and c.offload is not None and c.offload.k == 1
    assert c.peak == 114 * MiB and c.overhead_s == pytest.approx(0.1)
    assert all(o.label == "keep" for o in c.chosen.values() if o.label)
    slow = StepTiming(bwd_s=[1.0] * 6, h2d_bytes_per_s=4 * MiB, cpu_s_per_run=0.1)
    c = choose_with_offload(SEQ, MENUS, target, None, LAYERS, slow)
    assert c.feasible and c.offload is None
    assert c.peak == 114 * MiB and c.overhead_s == pytest.approx(2.0)
    assert sorted(o.label for o in c.chosen.values() if o.label) == ["half", "half", "keep", "keep"]
    # no timing (a CPU step, or the user's own offload setting): never offloads
    c = choose_with_offload(SEQ, MENUS, target, None, LAYERS, None)
    assert c.offload is None and c.overhead_s == pytest.approx(2.0)


def test_offload_reaches_a_peak_recompute_cannot():
    # recompute alone bottoms out at 4 + 4*10 + 50 = 94 MiB; three layers away at the head
    # (60 MiB) give 74 with nothing recomputed, each copy-back hidden (0.2 s in a 1 s window)
    fast = StepTiming(bwd_s=[1.0] * 6, h2d_bytes_per_s=100 * MiB, cpu_s_per_run=0.1)
    c = choose_with_offload(SEQ, MENUS, 84 * MiB, None, LAYERS, fast)
    assert c.feasible and c.offload is not None and c.offload.k == 3
    assert c.peak == 74 * MiB and c.overhead_s == pytest.approx(0.3)
    assert not choose_with_offload(SEQ, MENUS, 84 * MiB, None, LAYERS, None).feasible


def _offload_priced_free(monkeypatch):
    """The graph-break model of tests/test_step_regions.py on CPU with offload allowed as on
    CUDA and priced free: torch.compile's gradients, and a byte budget one layer's two
    (32, H) activations below what keeping everything needs."""
    import torch

    import memopt
    import memopt.state
    import memopt.step
    from tests.test_step_regions import H, _model, _plain, _train

    monkeypatch.setattr(memopt.state, "OFFLOAD_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(
        memopt.step, "offload_overhead", lambda choice, moved, timing, copies=None: 0.0
    )
    grads0, _ = _plain()
    other = _model()
    probe = memopt.optimize(other, budget=1 << 40)
    _train(probe, other, measure=False)
    budget = memopt.report(probe).step.peak - 2 * 32 * H * 4
    torch._dynamo.reset()
    return grads0, budget


def test_a_byte_budget_offloads_layers_across_regions_when_that_is_cheaper(monkeypatch, tmp_path):
    """Layers compiled as their own regions under a byte budget and ``offload_layers="auto"``:
    when the copy-back hides (here: priced free, and CPU let offload as CUDA does) the step
    plan offloads the first layers instead of recomputing, the report says so, and gradients
    stay torch.compile's."""
    import torch

    import memopt
    from tests.test_step_regions import H, _model, _train

    grads0, budget = _offload_priced_free(monkeypatch)
    model = _model()
    opt = memopt.optimize(model, budget=budget, offload_min_bytes=0, offload_layers="auto")
    grads, _ = _train(opt, model, steps=3, measure=False)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a, b)
    rep = memopt.report(opt)
    step = rep.step
    assert step.feasible and step.peak <= budget
    # one layer (block 0 and its resume: runs 0 and 1) away, nothing recomputed
    assert step.offload_runs == (0, 1)
    assert step.offloaded_bytes == 2 * 32 * H * 4
    assert rep.saved_bytes()[1] == rep.saved_bytes()[0]
    assert "chosen by the step plan" in rep.table()
    # frozen, the step plan's offload travels in the plan file and is applied as it was
    frozen = rep.frozen_plan()
    assert frozen == {"config": [], "sync": {}, "offload_layers": 1}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(frozen))
    torch._dynamo.reset()
    model = _model()
    again = memopt.optimize(model, config=str(path), offload_min_bytes=0)
    grads, _ = _train(again, model, steps=3, measure=False)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a, b)
    step = memopt.report(again).step
    assert step.offload_runs == (0, 1) and step.offloaded_bytes == 2 * 32 * H * 4
    assert step.offload_by == "offload_layers=1" and step.planned_offload_layers == 0
    assert memopt.report(again).config.sources["offload_layers"] == "plan file (argument)"


def test_copies_to_the_host_share_the_stream_and_free_memory_only_when_done():
    three = offload_choice(LAYERS, 3, 6)
    moved = {1: 20 * MiB, 2: 20 * MiB, 3: 20 * MiB}
    fast = StepTiming([1.0] * 6, 100 * MiB, 0.1, fwd_s=[1.0] * 6, d2h_bytes_per_s=100 * MiB)
    # copies of 0.2 s from each forward's end (2, 3, 4 s): done by the second run after it
    assert offload_times(three, moved, fast) == (pytest.approx(0.3), {1: 3, 2: 4, 3: 5})
    assert offload_choice(LAYERS, 3, 6, {1: 3, 2: 4, 3: 5}).away == three.away
    slow = StepTiming([1.0] * 6, 4 * MiB, 0.1, fwd_s=[1.0] * 6, d2h_bytes_per_s=4 * MiB)
    # 5 s each: the copies to the host end at 7, 12 and 17 s, after the forward (6 s): nothing
    # is away while a forward runs, and the copy-backs queue behind them: runs 3, 2 and 1
    # wait 14, 4 and 4 s
    wait, ready = offload_times(three, moved, slow)
    assert (wait, ready) == (pytest.approx(22.3), {1: 6, 2: 6, 3: 6})
    assert not offload_choice(LAYERS, 3, 6, ready).away


@pytest.mark.parametrize(
    "setting",
    [
        {},
        {"offload_layers": "auto", "disable_passes": ("offload",)},
        {"offload_layers": "auto", "cuda_graphs": True},
    ],
)
def test_budget_step_plans_recompute_unless_offload_is_auto(monkeypatch, setting):
    """Without ``offload_layers="auto"`` (the default), with the offload pass switched off, or
    under CUDA graphs (whose pools take a copy of each reloaded tensor: memopt.api), the same
    budget as above is met by recomputing, in the step plan and in each region's own plan,
    even where offloading is priced free."""
    import torch

    import memopt
    from memopt.api import _STATES
    from tests.test_step_regions import _model, _train

    grads0, budget = _offload_priced_free(monkeypatch)
    model = _model()
    setting = dict(setting)
    graphs = setting.pop("cuda_graphs", False)
    opt = memopt.optimize(model, budget=budget, offload_min_bytes=0, **setting)
    _STATES[opt].cuda_graphs = graphs  # as a region compiled with CUDA graphs sets it
    grads, _ = _train(opt, model, steps=3, measure=False)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a, b)
    rep = memopt.report(opt)
    assert rep.step.offload_runs == () and rep.offloaded_bytes() == 0
    assert rep.step.feasible and rep.step.peak <= budget
    before, after = rep.saved_bytes()
    assert after < before


def test_offload_layers_auto_needs_a_budget_and_is_checked():
    import memopt

    with pytest.raises(memopt.ConfigError, match="offload_layers='auto' lets a budget"):
        memopt.optimize(MLPish(), offload_layers="auto")
    with pytest.raises(memopt.ConfigError, match="'auto' and a sync dict both set"):
        memopt.optimize(MLPish(), offload_layers="auto", budget=0.5, sync={0: (True, 1, False, 1)})
    with pytest.raises(memopt.ConfigError, match="must be an int >= 0 or 'auto'"):
        memopt.optimize(MLPish(), offload_layers="some", budget=0.5)
    cfg = memopt.optimize(MLPish(), offload_layers="AUTO", budget=0.5)
    assert memopt.report(cfg).config.offload_layers == "auto"


def MLPish():
    import torch.nn as nn

    return nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))


def test_a_users_offload_layers_counts_in_a_budgets_step_plan(monkeypatch):
    """``offload_layers=1`` with a byte budget: the step plan is solved with that layer on the
    host where the user's offload puts it (the measurement's check counts it so too), so the
    budget that one layer's bytes cover is met without recomputing. The plan used to be solved
    as if nothing were away and recomputed for it (thirtieth session, on an H200)."""
    import torch

    import memopt
    from tests.test_step_regions import H, _model, _train

    grads0, budget = _offload_priced_free(monkeypatch)
    model = _model()
    opt = memopt.optimize(model, budget=budget, offload_min_bytes=0, offload_layers=1)
    grads, _ = _train(opt, model, steps=3, measure=False)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a, b)
    rep = memopt.report(opt)
    step = rep.step
    assert step.offload_by == "offload_layers=1" and step.offload_runs == (0, 1)
    assert step.offloaded_bytes == 2 * 32 * H * 4
    assert step.feasible and step.peak <= budget
    assert rep.saved_bytes()[1] == rep.saved_bytes()[0]  # nothing recomputed


def test_the_step_timing_lists_the_tensors_a_run_would_copy():
    """step_offload_timing: per run, the region's candidates of at least ``min_bytes`` (the
    smaller stay on the device and cost no copy), and the calibrated per-run and per-tensor
    forward-thread times as they are."""
    from types import SimpleNamespace as NS

    from memopt.step_layers import step_offload_timing

    rates = NS(h2d_bytes_per_s=1e9, d2h_bytes_per_s=2e9, run_offload_s=7e-5,
               run_offload_tensor_s=2e-5)  # fmt: skip
    cands = [
        NS(name="big", nbytes=4 * MiB),
        NS(name="edge", nbytes=MiB),
        NS(name="rstd", nbytes=64),
    ]
    tl = NS(bwd_op_s=(1e-3, 1e-3), fwd_op_s=(5e-4,))
    layer = NS(problem=NS(candidates=cands, timeline=tl), rates=rates)
    other = NS(problem=NS(candidates=[NS(name="x", nbytes=8 * MiB)], timeline=tl), rates=rates)
    problems = {0: other, 1: layer, 2: other}
    layers, t = step_offload_timing([0, 1, 1, 1, 2], ["e", "L", "L", "L", "h"], problems,
                                    min_bytes=MiB)  # fmt: skip
    assert layers == [[1], [2], [3]]
    assert t.tensors[1] == frozenset({"big", "edge"}) and t.tensors[0] == frozenset({"x"})
    assert (t.cpu_s_per_run, t.cpu_s_per_tensor) == (7e-5, 2e-5)
    assert t.bwd_s == [2e-3] * 5 and t.fwd_s == [5e-4] * 5
    assert (t.h2d_bytes_per_s, t.d2h_bytes_per_s) == (1e9, 2e9)
