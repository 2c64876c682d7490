"""memopt plan/fit building blocks on plain data: no tracing (milliseconds)."""

from __future__ import annotations

import sympy
import torch
import torch.nn as nn

from memopt.cli.analyze import trace_sizes
from memopt.cli.extrapolate import (
    evaluate,
    extrapolate_profile,
    extrapolate_region,
    finish_region,
    parse_expr,
)
from memopt.cli.fit import largest_fitting
from memopt.cli.liveness import PhasePeak, StepProfile, padded_operands
from memopt.cli.models import parse_value, split_overrides
from memopt.cli.peak import PeakModel, optimizer_bytes, static_bytes
from memopt.report import RegionReport

B, S = (sympy.Symbol(n, integer=True, positive=True) for n in ("batch", "seq"))
MIB = 2**20


def test_split_overrides_separates_model_config_from_plans():
    over, plans = split_overrides(
        ["n_layer=2", "BiasGelu+:1:-1,Gemm+:1:2", 'rope_scaling={"type":"linear","factor":2}']
    )
    assert over == {"n_layer": 2, "rope_scaling": {"type": "linear", "factor": 2}}
    assert plans == ["BiasGelu+:1:-1", "Gemm+:1:2"]
    assert parse_value("0.1") == 0.1 and parse_value("true") is True
    assert parse_value("gelu_new") == "gelu_new" and parse_value("None") is None


def test_trace_sizes_avoid_one_and_shared_symbols():
    assert trace_sizes(8, 2048) == (8, 2048)
    assert trace_sizes(1, 2048) == (2, 2048)
    assert trace_sizes(16, 16) == (17, 16)


def test_optimizer_bytes():
    p16 = torch.empty(512, 512, dtype=torch.bfloat16, device="meta")  # 0.5 MiB
    p32 = torch.empty(512, 512, dtype=torch.float32, device="meta")  # 1 MiB
    n, _ = optimizer_bytes([p16], optimizer="adamw")
    assert n == 2 * MIB + 4  # two fp32 states + the step
    n, _ = optimizer_bytes([p16], optimizer="adamw", state_dtype="param")
    assert n == MIB + 4
    n, _ = optimizer_bytes([p16, p32], optimizer="adamw", master_weights=True)
    assert n == 4 * MIB + 8 + MIB  # master copy of the bf16 parameter only
    assert optimizer_bytes([p32], optimizer="sgd")[0] == 0
    assert optimizer_bytes([p32], optimizer="sgd", momentum=True)[0] == MIB
    assert optimizer_bytes([p32], optimizer="none")[0] == 0


def test_static_bytes_counts_tied_parameters_once():
    with torch.device("meta"):
        emb = nn.Embedding(512, 512)
        head = nn.Linear(512, 512, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    st = static_bytes(model, optimizer="sgd")
    assert (st.parameters, st.gradients, st.optimizer, st.num_parameters) == (
        MIB,
        MIB,
        0,
        512 * 512,
    )


def _profile(act: sympy.Expr, grads: sympy.Expr, temps: sympy.Expr) -> StepProfile:
    phases = {
        "forward": PhasePeak(act, sympy.Integer(0), temps),
        "backward_start": PhasePeak(act, sympy.Integer(16), 2 * temps),
        "backward_end": PhasePeak(sympy.Integer(0), grads, sympy.Integer(0)),
    }
    return StepProfile(phases, saved=act, gradients=grads, inputs=16 * B * S)


def test_peak_model_picks_the_largest_phase_at_the_sizes():
    st = static_bytes(nn.Linear(4, 4, device="meta"), optimizer="none")
    model = PeakModel(st, _profile(100 * B * S, sympy.Integer(10**5), 10 * B * S))
    small = model.at({"batch": 1, "seq": 10})  # grads dominate
    assert small.phase_name == "backward_end"
    assert small.bytes == st.parameters + 160 + 10**5
    big = model.at({"batch": 8, "seq": 1024})
    assert big.phase_name == "backward_start"
    assert big.bytes == st.parameters + 16 * 8 * 1024 + 120 * 8 * 1024 + 16
    assert sum(evaluate(e, big.values) for _, e, _ in big.rows()) == big.bytes


def test_largest_fitting_is_exact_on_a_monotone_function():
    assert largest_fitting(lambda n: 100 + 7 * n, 1000) == (128, 996)
    assert largest_fitting(lambda n: 100 + 7 * n, 50) == (0, 107)
    assert largest_fitting(lambda n: n * n, 10**6) == (1000, 10**6)


def test_extrapolate_profile_is_affine_per_layer():
    small = _profile(300 * B * S, sympy.Integer(2000), 5 * B * S)  # 2 layers
    large = _profile(400 * B * S, sympy.Integer(3000), 5 * B * S)  # 3 layers
    deep = extrapolate_profile(small, large, steps=29)  # 32 layers
    assert deep.saved == 3300 * B * S
    assert deep.gradients == 32000
    start, end = deep.phases["backward_start"], deep.phases["backward_end"]
    assert (start.activations, start.gradients, start.temporaries) == (
        (400 + 29 * 100) * B * S,
        16,
        10 * B * S,
    )
    assert end.gradients == 3000 + 29 * 1000 and end.activations == 0


def _region(freq: int, saving: str, saved: str) -> RegionReport:
    return RegionReport(
        index=0,
        symbols={"s0": 4, "s1": 64},
        clusters=[
            {
                "cluster_id": "BiasGelu+",
                "strategy": 1,
                "count": -1,
                "freq": freq,
                "enabled": True,
                "source": "level",
                "available": [1],
                "saving_bytes": None,
                "saving_symbolic": saving,
                "note": None,
                "skipped": 0,
            }
        ],
        excluded=[
            {
                "root": "x",
                "reason": "random op",
                "bytes": 0,
                "symbolic": "s0*s1",
                "shape": "",
                "dtype": "",
                "compromise": False,
            }
        ]
        * freq,
        baseline_saved_symbolic=saved,
        baseline_saved_bytes=None,
        final_saved_symbolic=saved,
        final_saved_bytes=None,
    )


def test_regions_renamed_evaluated_and_extrapolated():
    names = {"s0": "batch", "s1": "seq"}
    values = {"batch": 8, "seq": 1024}
    small = finish_region(_region(2, "2048*s0*s1", "4096*s0*s1 + 4"), names, values)
    large = finish_region(_region(3, "3072*s0*s1", "6144*s0*s1 + 4"), names, values)
    assert small.clusters[0]["saving_symbolic"] == "2048*batch*seq"
    assert small.clusters[0]["saving_bytes"] == 2048 * 8 * 1024
    assert small.symbols == {"batch": 8, "seq": 1024}
    deep = extrapolate_region(small, large, steps=9, values=values)  # 12 layers
    row = deep.clusters[0]
    assert row["freq"] == 12 and row["saving_symbolic"] == "12288*batch*seq"
    assert deep.baseline_saved_symbolic == "24576*batch*seq + 4"
    assert deep.final_saved_bytes == 24576 * 8 * 1024 + 4
    assert len(deep.excluded) == 12


def test_parse_expr_reads_torch_size_functions():
    e = parse_expr("1024*batch*CeilToInt(IntTrueDiv(seq, 32))")
    assert evaluate(e, {"batch": 2, "seq": 100}) == 1024 * 2 * 4


def _mm_node(*shapes, dtype=torch.bfloat16, op=torch.ops.aten.mm.default):
    g = torch.fx.Graph()
    args = []
    for i, shape in enumerate(shapes):
        p = g.placeholder(f"x{i}")
        p.meta["val"] = torch.empty(shape, dtype=dtype, device="meta")
        args.append(p)
    return g.call_function(op, tuple(args)), args


def test_padded_operands_follow_inductors_pad_mm_rule():
    # LM head backward, GPT-2 vocabulary: grad (8192, 50257) @ W (50257, 1024) pads K on both
    mm, (a, b) = _mm_node((8192, 50257), (50257, 1024))
    assert padded_operands(mm) == [
        (a, sympy.Rational(50264, 50257)),
        (b, sympy.Rational(50264, 50257)),
    ]
    # forward logits: hidden (8192, 1024) @ W^T (1024, 50257) pads N: only W is copied
    mm, (a, b) = _mm_node((8192, 1024), (1024, 50257))
    assert padded_operands(mm) == [(b, sympy.Rational(50264, 50257))]
    # addmm: the bias is not an operand; M unaligned pads mat1 only
    mm, (_, m1, _) = _mm_node((1024,), (50257, 8192), (8192, 1024), op=torch.ops.aten.addmm.default)
    assert padded_operands(mm) == [(m1, sympy.Rational(50264, 50257))]
    # aligned sizes (Llama's 32000 vocabulary), small matmuls, and fp32 multiples of 4: no copy
    assert padded_operands(_mm_node((8192, 32000), (32000, 2048))[0]) == []
    assert padded_operands(_mm_node((128, 50257), (50257, 64))[0]) == []  # memory-bound
    fp32 = _mm_node((8192, 1028), (1028, 4096), dtype=torch.float32)[0]
    assert padded_operands(fp32) == []
    fp32 = _mm_node((8192, 1026), (1026, 4096), dtype=torch.float32)[0]
    assert [f for _, f in padded_operands(fp32)] == [sympy.Rational(1028, 1026)] * 2


def test_padded_copy_runs_next_to_its_matmul_and_copies_of_one_input_run_together():
    """A lone padded copy is its own kernel where it stands (BERT's MLM head on an H100: the
    saved logits are freed before the logits gradient's copy is made); two copies of one
    storage with as many elements are one kernel, at the first of them (GPT-2's LM head);
    a copy of another size is not part of that kernel."""
    from memopt.cli.liveness import _start

    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(aten.relu.default, (x,))
    v = g.call_function(aten.view.default, (y, [4, 8]))
    other = g.call_function(aten.neg.default, (x,))
    pad = g.call_function(aten.constant_pad_nd.default, (v, [0, 0, 0, 4]))
    t = g.call_function(aten.permute.default, (v, [1, 0]))
    pad_t = g.call_function(aten.constant_pad_nd.default, (t, [0, 4]))
    pad_small = g.call_function(aten.constant_pad_nd.default, (v, [0, 0, 0, 1]))
    shapes = ((x, (32,)), (y, (32,)), (v, (4, 8)), (other, (32,)), (pad, (8, 8)))
    shapes += ((t, (8, 4)), (pad_t, (8, 8)), (pad_small, (5, 8)))
    for node, shape in shapes:
        node.meta["val"] = torch.empty(shape, device="meta")
    pos = {y: 0, v: 1, other: 2, pad: 3}
    assert _start(pad, pos) == 3  # alone: where it stands, not at relu
    assert _start(other, pos) == 2
    pos = {y: 0, v: 1, other: 2, pad: 3, t: 4, pad_t: 6, pad_small: 5}
    assert _start(pad_t, pos) == 3  # with the copy of the same size: at the first of them
    assert _start(pad, pos) == 3
    assert _start(pad_small, pos) == 5  # another size: its own kernel


def test_rule_made_padded_copies_start_at_the_kernel_that_makes_their_operand():
    """Traced where Inductor does not pad (memopt plan emulating a GPU): a copy is live from
    the kernel that makes its operand (an over-estimate kept on purpose: memory_rules.
    padded_copies), here the LM head's gradient made at position 0, to its matmul."""
    from memopt.memory_rules import padded_copies

    aten = torch.ops.aten
    g = torch.fx.Graph()
    a, w, h = g.placeholder("a"), g.placeholder("w"), g.placeholder("h")
    grad = g.call_function(aten.neg.default, (a,))
    mm1 = g.call_function(aten.mm.default, (grad, w))
    t = g.call_function(aten.permute.default, (grad, [1, 0]))
    mm2 = g.call_function(aten.mm.default, (t, h))
    vals = ((a, (8192, 50257)), (grad, (8192, 50257)), (w, (50257, 1024)), (h, (8192, 1024)))
    vals += ((mm1, (8192, 1024)), (t, (50257, 8192)), (mm2, (50257, 1024)))
    for node, shape in vals:
        node.meta["val"] = torch.empty(shape, dtype=torch.bfloat16, device="meta")
    ops = [grad, mm1, t, mm2]
    pos = {n: i for i, n in enumerate(ops)}
    f = sympy.Rational(50264, 50257)
    assert padded_copies(ops, pos) == [(grad, f, 0, 1), (w, f, 1, 1), (t, f, 0, 3)]


def test_value_copied_into_two_padded_operands_is_materialized():
    from memopt.cli.liveness import _alias_users, _must_exist

    def graph(two: bool):
        g = torch.fx.Graph()
        a, b, w = g.placeholder("a"), g.placeholder("b"), g.placeholder("w")
        add = g.call_function(torch.ops.aten.add.Tensor, (a, b))
        t = g.call_function(torch.ops.aten.permute.default, (add, [1, 0]))
        p1 = g.call_function(torch.ops.aten.constant_pad_nd.default, (t, [0, 0, 0, 7]))
        g.call_function(torch.ops.aten.mm.default, (p1, w))
        if two:
            p2 = g.call_function(torch.ops.aten.constant_pad_nd.default, (add, [0, 7]))
            g.call_function(torch.ops.aten.mm.default, (p2, w))
        return add

    add = graph(two=True)
    assert _must_exist(add, _alias_users(add))
    add = graph(two=False)
    assert not _must_exist(add, _alias_users(add))


def test_values_are_read_where_the_fused_kernel_that_consumes_them_runs():
    """The LM-head backward on CUDA: the saved logits go through a chain of pointwise ops and a
    reduction that Inductor fuses into the kernel writing the logits gradient, so the logits
    are read there (position 5), not at their first pointwise user (position 1); the tangent
    is read there too, and all three are live at once."""
    from memopt.memory_rules import ReadPoints

    aten = torch.ops.aten
    g = torch.fx.Graph()
    logits, tangent, w = g.placeholder("logits"), g.placeholder("tangent"), g.placeholder("w")
    up = g.call_function(torch.ops.prims.convert_element_type.default, (logits, torch.float32))
    ex = g.call_function(aten.exp.default, (up,))
    s = g.call_function(aten.sum.dim_IntList, (ex, [1], True))
    d = g.call_function(aten.div.Tensor, (ex, s))
    down = g.call_function(torch.ops.prims.convert_element_type.default, (d, torch.bfloat16))
    grad = g.call_function(aten.add.Tensor, (tangent, down))
    mm = g.call_function(aten.mm.default, (grad, w))
    g.output((mm,))
    pos = {n: i for i, n in enumerate([up, ex, s, d, down, grad, mm])}
    rp = ReadPoints(pos)
    assert [rp.at(n) for n in (up, ex, s, d, down, grad, mm)] == [5, 5, 2, 5, 5, 5, 6]
    assert rp.last(list(logits.users), -1) == 5  # via up -> ex -> d -> down -> grad
    assert rp.last(list(tangent.users), -1) == 5
    assert rp.last([], 3) == 3


def test_a_phase_keeps_every_place_that_peaks_at_other_sizes():
    """DeepSeek-V2 and Falcon-H1 (sweep 8): the largest place of "the start of the backward"
    moved with the batch, and the formula read at batch 2 fell short at batch 3. The sweep
    keeps each place that is the largest at scaled sizes; the peak model takes the largest
    at the sizes asked, and names its phase."""
    from memopt.cli.liveness import _Sweep
    from memopt.symbolic import SymbolTable

    b = sympy.Symbol("batch", integer=True, positive=True)
    sweep = _Sweep(SymbolTable({}, {"batch": 2}))
    sweep.items = [  # (start, end, kind, bytes at batch 2, formula)
        (0, 1, "activations", 1000, sympy.Integer(1000)),  # held at both places
        (0, 0, "temporaries", 200, 100 * b),  # place 0: 1000 + 100*batch
        (1, 1, "gradients", 160, 80 * b),  # place 1: 1000 + 80*batch ...
        (1, 1, "activations", 0, 30 * b - 60),  # ... + 30*batch - 60 (110*batch + 940)
    ]
    first, *others = sweep.peaks(0, 1)
    assert first.total == 1000 + 100 * b  # at batch 2: 1200 against 1160
    assert [o.total for o in others] == [940 + 110 * b]  # larger from batch 7 on
    assert sweep.peak(0, 1) == first  # the traced sizes' place, as before
    st = static_bytes(nn.Linear(4, 4, device="meta"), optimizer="none")
    profile = StepProfile(
        {
            "forward": PhasePeak(*(sympy.Integer(0),) * 3),
            "backward_start": first,
            "backward_start~1": others[0],
        },  # fmt: skip
        saved=sympy.Integer(0),
        gradients=sympy.Integer(0),
        inputs=sympy.Integer(0),
    )
    model = PeakModel(st, profile)
    at2, at8 = model.at({"batch": 2}), model.at({"batch": 8})
    assert (at2.phase_name, at2.bytes - st.parameters) == ("backward_start", 1200)
    assert (at8.phase_name, at8.bytes - st.parameters) == ("backward_start", 1820)
    # the batch-2 formula holds up to batch 6; the plan says where the peak goes after it
    assert at2.next_place() == (7, "backward_start", st.parameters + 940 + 110 * b)
    assert at2.to_dict()["moves"] == {
        "from_batch": 7,
        "phase": "backward_start",
        "symbolic": str(st.parameters + 940 + 110 * b),
    }
    assert at8.next_place() is None and "moves" not in at8.to_dict()
    from memopt.cli.show import peak_lines

    assert peak_lines(at2.to_dict())[-1] == (
        f"  from batch 7 the peak is elsewhere, at the start of the backward: "
        f"110*batch + {st.parameters + 940}"
    )
