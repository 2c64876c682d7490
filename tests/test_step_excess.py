"""Inductor's excess over the planner's model, placed where it peaks (memopt.step_excess) and
found from the buffer plan's FX origins (memopt.inductor_buffers.peak_nodes), and the step
planner's choice when nothing fits (memopt.step.better): plain data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memopt import step_excess
from memopt.inductor_buffers import PEAK_NODES, Event, GraphBuffers, peak_nodes, replay
from memopt.planner.synthetic import LayerTensor, layered_problem
from memopt.step import Option

MiB = 1 << 20


def _graph(events, nodes=("a", "b", "c", "d", "e")) -> GraphBuffers:
    return GraphBuffers(
        backward=True, device="cpu", inputs={}, events=tuple(events), outputs=(), nodes=nodes
    )


def test_peak_nodes_start_at_the_node_the_peak_buffer_holds():
    g = _graph(
        [
            Event("alloc", "buf0", 100, origin="a"),
            Event("alloc", "buf1", 300, origin="c"),  # the peak: 400 live
            Event("free", "buf0"),
            Event("alloc", "buf2", 50, origin="e"),
        ]
    )
    r = replay(g)
    assert (r.peak, r.peak_event) == (400, 1)
    assert peak_nodes(g, r.peak_event) == ("c", "d", "e")
    assert peak_nodes(g, -1) == ("a", "b", "c", "d", "e")  # a peak at the entry


def test_a_peak_buffer_of_no_known_node_takes_the_earliest_of_its_kernels_allocations():
    g = _graph(
        [
            Event("alloc", "buf0", 10, origin="d"),
            Event("free", "buf0"),
            Event("alloc", "buf1", 20, origin="c"),  # one kernel's outputs, allocated together
            Event("alloc", "buf2", 30),  # the peak: no origin
            Event("alloc", "buf3", 5, origin="e"),
        ]
    )
    assert peak_nodes(g, 3) == ("c", "d", "e")
    assert peak_nodes(_graph([Event("alloc", "x", 1)]), 0) == ()  # nothing known
    assert peak_nodes(replace(g, nodes=()), 3) == ()  # a graph read without its names


def test_peak_nodes_keep_at_most_peak_nodes_names():
    nodes = tuple(f"n{i}" for i in range(3 * PEAK_NODES))
    g = _graph([Event("alloc", "buf0", 1, origin="n5")], nodes)
    assert peak_nodes(g, 0) == nodes[5 : 5 + PEAK_NODES]


def _problem(tensors=None, n_layers=2):
    """Two layers of one 10 MiB recomputable tensor each; 2 + 2 * 3 = 8 ops a phase, named
    (or ``n_layers`` of ``tensors``)."""
    from memopt.planner import OpCost

    one = LayerTensor("MatMul+", 10 * MiB, slot=1, recompute_ops=(OpCost(flops=1e9),))
    p = layered_problem(
        tensors or [one],
        n_layers=n_layers,
        ops_per_layer=3,
        fwd_op_s=1e-3,
        live_bytes=MiB,
        static_bytes=4 * MiB,
    )
    tl = p.timeline
    names = dict(
        fwd_op_names=tuple(f"f{i}" for i in range(tl.n_fwd)),
        bwd_op_names=tuple(f"b{i}" for i in range(len(tl.bwd_op_s))),
    )
    return replace(p, timeline=replace(tl, **names))


def test_the_position_is_the_first_peak_node_the_planners_graph_has():
    tl = _problem().timeline
    sec = {"fwd_peak": 10, "bwd_peak": 20, "bwd_peak_nodes": ["post_grad_only", "b3", "b4"]}
    assert step_excess.position(sec, tl) == tl.n_fwd + 3 == 11
    sec = {"fwd_peak": 30, "bwd_peak": 20, "fwd_peak_nodes": ["f6", "f7"]}
    assert step_excess.position(sec, tl) == 6
    assert step_excess.position({"fwd_peak": 1, "bwd_peak": 2, "bwd_peak_nodes": ["x"]}, tl) is None
    assert step_excess.position({"bwd_peak": 2, "bwd_peak_nodes": ["b0"]}, tl) == 8


def test_the_excess_is_measured_at_its_position_under_the_compiled_plan():
    """Under the plan that recomputes layer 1's tensor, the model holds 4 + 1 + 10 MiB at the
    backward's op 3 (layer 0's tensor saved; layer 1's recomputed copy freed after its use at
    op 2, where the plan peaks at 25 MiB): an Inductor peak of 27 MiB at op 3 is 12 MiB over
    the model there, though only 2 MiB over the plan's peak."""
    p = _problem()
    recompute = Option(plans=("MatMul+:1:1",), decisions={"MatMul_1": 1})
    prof = step_excess.profile(p, recompute)
    assert (prof.curve[10], prof.curve[11], prof.peak) == (25 * MiB, 15 * MiB, 25 * MiB)
    sec = {"peak": 27 * MiB, "fwd_peak": 0, "bwd_peak": 27 * MiB, "bwd_peak_nodes": ["b3"]}
    assert step_excess.excess(p, sec, recompute) == (11, 12 * MiB)
    own = {**sec, "model_peak": prof.peak}
    assert step_excess.excess(p, own) == (11, 2 * MiB)  # no plan known: over its peak only
    assert step_excess.excess(p, {**sec, "peak": 15 * MiB}, recompute) is None
    assert step_excess.profile(p, Option((), decisions={"MatMul_1": 3})) is None  # no window


def test_placed_excesses_add_only_what_the_regions_number_does_not():
    p = _problem()
    items: dict[int, int] = {}
    step_excess.grow(items, 11, 5 * MiB)
    step_excess.grow(items, 11, 3 * MiB)  # a smaller one at the same op keeps the larger
    step_excess.grow(items, 2, MiB)
    assert items == {11: 5 * MiB, 2: MiB}
    more = step_excess.remainder(items, 2 * MiB)  # 2 MiB already counted at every position
    assert more == {11: 3 * MiB}
    fixed = step_excess.corrected(p, more)
    base, new = p.timeline.base_bytes, fixed.timeline.base_bytes
    assert [b - a for a, b in zip(base, new)] == [0] * 11 + [3 * MiB] + [0] * 4
    assert step_excess.corrected(p, {}) is p
    assert fixed.candidates == p.candidates and fixed.fixed == p.fixed


def test_timeline_names_must_match_its_ops():
    tl = _problem().timeline
    with pytest.raises(ValueError, match="bwd_op_names"):
        replace(tl, bwd_op_names=("b0",))


def test_when_nothing_fits_peaks_a_tie_apart_are_equal_and_the_cheaper_plan_wins():
    """INFEASIBLE_TIE: 0.1% of a 1,000,000-byte target is 1,000 bytes. A plan 800 bytes under
    another for 40 ms more is not taken (nor one 2 bytes under, across any grid line); a plan
    50 KB lower is."""
    from memopt.step import INFEASIBLE_TIE, better, choose

    target = 1_000_000
    assert int(INFEASIBLE_TIE * target) == 1000
    cheap = Option(("A+:1:1",), peak=1_200_900, saved=10, overhead_s=0.010, label="cheap")
    lower = Option(("B+:1:1",), peak=1_200_100, saved=10, overhead_s=0.050, label="lower")
    low = Option(("C+:1:1",), peak=1_150_000, saved=10, overhead_s=0.090, label="low")
    keep = Option((), peak=1_300_000, saved=20, overhead_s=0.0, label="keep")
    got = choose([0], {0: [keep, cheap, lower]}, target)
    assert not got.feasible and got.chosen[0].label == "cheap" and got.peak == 1_200_900
    got = choose([0], {0: [keep, cheap, lower, low]}, target)
    assert got.chosen[0].label == "low" and got.peak == 1_150_000
    fits = choose([0], {0: [keep, cheap, lower, low]}, 1_250_000)  # the cheapest that fits
    assert fits.feasible and fits.chosen[0].label == "cheap"
    assert better((False, 0.01, 1_200_001), (False, 0.05, 1_199_999), target)  # a tie: cheaper
    assert not better((False, 0.01, 1_201_001), (False, 0.05, 1_200_000), target)  # not a tie
    assert better((True, 0.5, 10**9), (False, 0.0, 1), target)  # fitting comes first


def _stub(problem, placed, err=0):
    """A stand-in for memopt.state's MemoptState holding one region: its real ``_problem``."""
    from types import MethodType, SimpleNamespace

    from memopt.state import MemoptState
    from passes.plan_budget import RegionProblem
    from tests.test_planner_solver import RATES

    rp = RegionProblem(problem=problem, rates=RATES, device_type="cuda")
    st = SimpleNamespace(
        problems={0: rp}, _compiled_err={0: err}, _compiled_at={0: placed}, _compiled_num={}
    )
    st._problem = MethodType(MemoptState._problem, st)
    return st


def test_an_excess_holds_for_plans_that_treat_the_tensors_its_op_reads_as_its_plan_did():
    """Mistral at torch 0.1's peak (H200): 780 MB placed at a backward op under plans that kept
    the LM head's output; a plan recomputing it ran 565 MB under the prediction carrying them.
    Here layer 1's tensor is read at the backward's op 2 (position 10), layer 0's at op 5 (13):
    an excess placed at 10 under a plan keeping layer 1's tensor does not hold for a plan that
    recomputes it; the menu is solved with every excess and with none, each option priced with
    those that hold for it."""
    from memopt.step_excess import union as _union

    p = _problem()
    keep, rec = (
        Option(("K+:1:1",), label="keep"),
        Option(("MatMul+:1:1",), decisions={"MatMul_1": 1}, label="rec"),
    )
    at10, at13 = step_excess.signature(p, {}, 10), step_excess.signature(p, {}, 13)
    assert (at10, at13) == ({("MatMul_1", "KEEP")}, {("MatMul_0", "KEEP")})
    assert step_excess.signature(p, rec.decisions, 10) == {("MatMul_1", "RECOMPUTE")}
    assert step_excess.signature(p, {}, 8) == frozenset()  # an op reading no candidate
    # in the forward: made at 2 (layer 0) and 5 (layer 1), read by nothing after
    fwd = [step_excess.signature(p, {}, q) for q in (1, 2, 3, 5)]
    assert fwd == [set(), {("MatMul_0", "KEEP")}, set(), {("MatMul_1", "KEEP")}]
    assert not step_excess.holds(p, rec.decisions, at10) and step_excess.holds(p, {}, at10)
    placed = {(10, at10): 5 * MiB, (13, at13): 3 * MiB, (8, frozenset()): 2 * MiB}
    assert step_excess.items(placed, MiB) == {10: 4 * MiB, 13: 2 * MiB, 8: MiB}
    assert step_excess.items(placed, MiB, p, rec) == {13: 2 * MiB, 8: MiB}
    assert step_excess.items(placed, MiB, p, keep) == {10: 4 * MiB, 13: 2 * MiB, 8: MiB}
    st, calls = _stub(p, placed, err=MiB), []

    other = Option(("O+:1:1",), decisions={"MatMul_0": 1}, label="other")

    def fn(problem, rates, budget, saved_inputs, max_depth):
        base, tl = p.timeline.base_bytes, problem.timeline.base_bytes
        if problem.fixed:  # a flip (test_a_flip_finds_...): nothing new here
            calls.append(dict(problem.fixed))
            return []
        calls.append({i: (b - a) // MiB for i, (a, b) in enumerate(zip(base, tl)) if b != a})
        if len(calls) % 2 == 0:  # solved with none: a plan the other solve did not find
            return [replace(keep, peak=100 * MiB), replace(other, peak=300 * MiB)]
        return [replace(keep, peak=100 * MiB), replace(rec, peak=200 * MiB)]

    got = step_excess.conditioned(st, 0, fn, 123, merge=_union)
    # every excess, then none, then each flip of a candidate an excess's op reads, the
    # cheaper first: layer 0's tensor (read at 13), then layer 1's (a count covers both:
    # -1, all, as the solver writes it)
    assert calls == [{10: 4, 13: 2, 8: 1}, {}, {"MatMul+": (1, 1)}, {"MatMul+": (1, -1)}]
    # solved with every excess: the recompute plan's peak drops by what the one that does not
    # hold for it added to the model's peak (25 + 4 MiB at position 10 -> 25 MiB there, 15 + 2
    # at 13, 15 + 1 at 8); the plan only the second solve found is kept, priced with what
    # holds for it: it keeps layer 1's tensor (the excess at 10 holds: its peak 15 -> 19 MiB
    # there) and recomputes layer 0's (the one at 13 does not)
    assert [(o.label, o.peak // MiB) for o in got] == [("keep", 100), ("rec", 196), ("other", 304)]
    # solved with none: each option gains what holds for it
    calls.clear()
    seen = step_excess.conditioned(st, 0, fn, 1, merge=lambda a, b: b or a)
    assert [(o.label, o.peak // MiB) for o in seen] == [("keep", 104), ("other", 304)]
    nothing = _stub(p, {(10, at10): MiB}, err=MiB)  # nothing beyond the region's number
    calls.clear()
    assert len(step_excess.conditioned(nothing, 0, fn, 1, merge=_union)) == 2 and calls == [{}]


def test_a_finer_solve_takes_the_cheaper_plan_that_still_fits_once_priced():
    """30 MiB placed at position 10 under the plan keeping layer 1's tensor, a 50 MiB budget:
    solved with no excess, keeping everything fits (25 MiB) but, priced with the excess that
    holds for it, runs at 55 MiB; the plan solved with every excess recomputes layer 0's
    tensor (15 + 30 MiB at 10). Taking the cheaper of the two regardless of the budget
    returned the 55 MiB plan."""
    from functools import partial

    from memopt.step import exact_option, region_menu
    from memopt.step_excess import cheaper as _cheaper
    from memopt.step_excess import union as _union

    p = _problem()
    st = _stub(p, {(10, step_excess.signature(p, {}, 10)): 30 * MiB})
    got = step_excess.conditioned(st, 0, exact_option, 50 * MiB, merge=partial(_cheaper, 50 * MiB))
    assert got is not None and (got.peak, got.decisions) == (45 * MiB, {"MatMul_0": 1})
    assert got.overhead_s > 0  # the keep plan (no overhead) was over once priced
    # at 40 MiB neither of the two solves fits (55 MiB solved with every excess, and no lower
    # than keeping everything solved with none); the flip of layer 1's tensor, which the
    # excess's op reads, does: a count covers layer 0's too (occurrences below it, as a plan
    # string's), so it recomputes both (15 MiB, twice the time), as the menu's cheapest entry
    # that fits does
    fit = partial(_cheaper, 40 * MiB)
    flip = step_excess.conditioned(st, 0, exact_option, 40 * MiB, merge=fit)
    assert flip is not None and flip.plans == ("MatMul+:1:-1",) and flip.peak == 15 * MiB
    assert flip.overhead_s == pytest.approx(2 * got.overhead_s)
    menu = step_excess.conditioned(st, 0, region_menu, merge=_union)
    fits = sorted((o.overhead_s, o.peak, dict(o.decisions)) for o in menu if o.peak <= 40 * MiB)
    assert fits[0][1:] == (15 * MiB, {"MatMul_0": 1, "MatMul_1": 1})
    assert fits[0][0] == pytest.approx(2 * got.overhead_s)


def test_a_flip_finds_the_cheap_recompute_that_changes_what_the_excesss_op_reads(monkeypatch):
    """Gemma 2 at torch 0.3's peak (H200): 2.1 GB placed at the backward's first kernel, which
    reads the soft-capped logits; solved with every excess the step recomputed the LM head and
    more (8.7 ms predicted), solved with none it kept everything (the excess holds). Here one
    layer saves a dear tensor (slot 0, read last in the backward) and a cheap one (slot 2,
    read first); 8 MiB is placed where the cheap one is read, under the plan keeping it. The
    flip recomputes the cheap one: the excess does not hold, and the plan fits for a
    thousandth of the dear recompute's time."""
    from functools import partial

    from memopt.planner import OpCost
    from memopt.step import exact_option, region_menu
    from memopt.step_excess import cheaper as _cheaper
    from memopt.step_excess import union as _union

    dear = LayerTensor("Dear+", 10 * MiB, slot=0, recompute_ops=(OpCost(flops=1e12),))
    cheap = LayerTensor("Cheap+", 10 * MiB, slot=2, recompute_ops=(OpCost(flops=1e9),))
    p = _problem([dear, cheap], n_layers=1)
    q = p.timeline.n_fwd + p.by_name["Cheap_0"].first_bwd_use_pos
    sig = step_excess.signature(p, {}, q)
    assert sig == {("Cheap_0", "KEEP")}  # the dear tensor is held there, not read
    # a tensor under an eighth of the excess is not in its signature (SIGNATURE_SHARE)
    assert step_excess.signature(p, {}, q, 80 * MiB) == sig
    assert step_excess.signature(p, {}, q, 80 * MiB + 8) == frozenset()
    keep = step_excess.profile(p, Option(())).peak
    assert keep == 25 * MiB
    st = _stub(p, {(q, sig): 8 * MiB})
    assert [f.problem.fixed for f in step_excess.flips(st, 0)] == [{"Cheap+": (1, -1)}]
    budget = keep + MiB  # the model's keep plan fits; with the excess it does not
    got = step_excess.conditioned(st, 0, exact_option, budget, merge=partial(_cheaper, budget))
    assert got is not None and got.plans == ("Cheap+:1:-1",)
    assert (got.peak, dict(got.decisions)) == (keep, {"Cheap_0": 1})
    monkeypatch.setattr(step_excess, "FLIPS", 0)  # the two solves alone: the dear plan
    two = step_excess.conditioned(st, 0, exact_option, budget, merge=partial(_cheaper, budget))
    assert two is not None and dict(two.decisions) == {"Dear_0": 1}
    assert two.overhead_s == pytest.approx(1000 * got.overhead_s)
    # the menu's saved-share entries reach the cheap recompute without a flip
    menu = step_excess.conditioned(st, 0, region_menu, merge=_union)
    fits = sorted((o.overhead_s, o.peak, dict(o.decisions)) for o in menu if o.peak <= budget)
    assert fits[0] == (got.overhead_s, keep, {"Cheap_0": 1})
    monkeypatch.undo()
    st._compiled_at[0] = {(q, frozenset({("Cheap_0", "RECOMPUTE")})): 8 * MiB}
    assert step_excess.flips(st, 0) == []  # nothing kept to flip
    # a cluster with only a compromise is flipped to strategy 2: memopt.decide ignores
    # strategy 1 there
    comp = replace(cheap, compromise_kept_bytes=MiB, compromise_ops=cheap.recompute_ops)
    p2 = _problem([dear, comp], n_layers=1)
    only = tuple(replace(c, compromise_only=c.name == "Cheap_0") for c in p2.candidates)
    p2 = replace(p2, candidates=only)
    st2 = _stub(p2, {(q, step_excess.signature(p2, {}, q)): 8 * MiB})
    assert [f.problem.fixed for f in step_excess.flips(st2, 0)] == [{"Cheap+": (2, -1)}]


def test_a_smaller_excess_under_another_plan_at_the_same_op_is_new():
    """What the step's check compares to decide a re-plan: by position and signature, not the
    largest excess per position (which hides a second plan's own excess there)."""
    from types import SimpleNamespace

    a, b = frozenset({("MatMul_1", "KEEP")}), frozenset({("MatMul_1", "RECOMPUTE")})
    st = SimpleNamespace(
        _compiled_at={0: {(10, a): 5 * MiB}}, _compiled_err={0: MiB}, _compiled_num={}
    )
    was, log = step_excess._beyond(st), step_excess._placed(st)
    st._compiled_at[0][(10, b)] = 3 * MiB
    assert step_excess._placed(st) == log == {0: {10: 5 * MiB}}  # the log's view: unchanged
    assert step_excess._beyond(st) != was  # new: the plan it was measured on is another
    st._compiled_at[0][(11, b)] = MiB  # not above the region's number: nothing new
    assert step_excess._beyond(st) == {0: {(10, a): 5 * MiB, (10, b): 3 * MiB}}
    st._compiled_num[0] = {b: 2 * MiB}  # a number held for plans like b's: new too
    assert step_excess._beyond(st)[0][("number", b)] == 2 * MiB


def test_a_regions_number_holds_at_every_position_for_the_plans_like_its_own():
    """Gemma 2's tiny soft-capped head on the CPU: the whole excess was the region's number,
    applied to every plan, so the plan that recomputes the soft-cap (one logits tensor less at
    that kernel) was priced as high as keeping it. A number measured on a plan whose excess
    has a place holds, at every position, for the plans that treat its op's tensors alike."""
    p = _problem()
    keep, rec = Option(("K+:1:1",)), Option(("MatMul+:1:1",), decisions={"MatMul_1": 1})
    at10 = step_excess.signature(p, {}, 10)
    n = p.timeline.n_positions
    numbers = {at10: 3 * MiB}
    assert step_excess.items({}, MiB, p, keep, numbers) == dict.fromkeys(range(n), 2 * MiB)
    assert step_excess.items({}, MiB, p, rec, numbers) == {}  # not for the recompute plan
    assert step_excess.items({}, 0, p, None, numbers) == dict.fromkeys(range(n), 3 * MiB)
    placed = {(10, at10): 5 * MiB}
    assert step_excess.items(placed, 0, p, keep, numbers) == {
        **dict.fromkeys(range(n), 3 * MiB),
        10: 5 * MiB,
    }
    st = _stub(p, placed)
    st._compiled_num = {0: numbers}
    assert step_excess.profile(st._problem(0, rec).problem, rec).peak == 25 * MiB  # the model's
    assert step_excess.profile(st._problem(0, keep).problem, keep).peak == 30 * MiB  # 25 + 5
