"""memopt.kernel_times: the graph's own kernels timed on the device, cached, shared by the
ranks (rank 0 times, the others read its times from the store); the planner prices an op by
its measured time where there is one."""

from __future__ import annotations

import json
import logging
import time

import pytest
import torch
import torch.nn.functional as F
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from memopt import facts
from memopt import kernel_times as kt
from memopt import meta_keys as mk
from memopt.passes.build_planning_problem import Sizes, op_cost
from memopt.planner import CPU_DEFAULTS, OpCost, op_s, ops_s, roofline_s

CPU = torch.device("cpu")


def _value(e):
    return int(e)


def _graph():
    def f(a, b, bias, x, w, q):
        y = torch.mm(a, b).relu()
        z = torch.addmm(bias, a, b.t().contiguous().t())
        c = F.conv2d(x, w, padding=1)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return y, z, c, o

    args = (
        torch.randn(8, 16),
        torch.randn(16, 4),
        torch.randn(4),
        torch.randn(2, 3, 8, 8),
        torch.randn(5, 3, 3, 3),
        torch.randn(1, 2, 8, 4),
    )
    return make_fx(f, tracing_mode="fake")(*args)


def test_signatures_name_op_dtypes_sizes_strides_and_arguments():
    sigs = list(kt.signatures([_graph()], _value))
    assert sigs == [
        "aten.mm.default(float32[8,16]s[16,1]@cpu,float32[16,4]s[4,1]@cpu)",
        # the transposed operand differs by its strides
        "aten.addmm.default(float32[4]s[1]@cpu,float32[8,16]s[16,1]@cpu,float32[16,4]s[1,16]@cpu)",
        "aten.convolution.default(float32[2,3,8,8]s[192,64,8,1]@cpu,float32[5,3,3,3]s[27,9,3,1]@cpu,"
        "None,[1,1],[1,1],[1,1],False,[0,0],1)",
        "aten._scaled_dot_product_flash_attention_for_cpu.default(float32[1,2,8,4]s[64,32,4,1]@cpu,"
        "float32[1,2,8,4]s[64,32,4,1]@cpu,float32[1,2,8,4]s[64,32,4,1]@cpu,0.0,True)",
    ]
    # pointwise ops (relu) and copies are not timed
    relu = next(n for n in _graph().graph.nodes if "relu" in str(n.target))
    assert kt.signature(relu, _value) is None


def test_symbolic_sizes_are_evaluated_and_an_unknown_one_gives_no_signature():
    g = make_fx(torch.mm, tracing_mode="symbolic")(torch.randn(8, 16), torch.randn(16, 4))
    mm = next(n for n in g.graph.nodes if n.op == "call_function")
    assert kt.signature(mm, lambda e: None) is None  # not timed, so the roofline prices it
    hints = mm.meta["val"].shape[0].node.shape_env.var_to_val  # the traced sizes

    def value(e):
        return int(e.xreplace(hints))

    assert kt.signature(mm, value) == (
        "aten.mm.default(float32[8,16]s[16,1]@cpu,float32[16,4]s[4,1]@cpu)"
    )


def test_real_args_have_the_graphs_sizes_strides_and_dtypes():
    add = next(n for n in _graph().graph.nodes if "addmm" in str(n.target))
    args, kwargs = kt.real_args(add, CPU, _value)
    assert [tuple(a.shape) for a in args] == [(4,), (8, 16), (16, 4)]
    assert [a.stride() for a in args] == [(1,), (16, 1), (1, 16)]
    assert all(
        a.dtype == torch.float32 and not isinstance(a, torch._subclasses.FakeTensor) for a in args
    )
    assert kwargs == {}


def test_time_kernel_runs_each_kind_and_refuses_what_cannot_run():
    g = _graph()
    for s, n in kt.signatures([g], _value).items():
        t = kt.time_kernel(n, CPU, _value)
        assert t is not None and kt.PLAUSIBLE_S[0] <= t <= kt.PLAUSIBLE_S[1], s
    mm = next(n for n in g.graph.nodes if "mm.default" in str(n.target))
    bad = list(mm.args)
    mm.args = (bad[0], bad[0])  # (8,16) @ (8,16): the kernel raises
    assert kt.time_kernel(mm, CPU, _value) is None


def test_measure_times_once_then_reads_the_cache(tmp_path, monkeypatch):
    calls = []

    def fake_time(node, device, value):
        calls.append(str(node.target))
        return 2e-3 if "convolution" in str(node.target) else 1e-3

    monkeypatch.setattr(kt, "time_kernel", fake_time)
    g = _graph()
    first = kt.measure([g, g], CPU, _value, str(tmp_path))
    assert len(calls) == 4  # each signature once, though the graph came twice
    assert sorted(first.values()) == [1e-3, 1e-3, 1e-3, 2e-3]
    again = kt.measure([g], CPU, _value, str(tmp_path))
    assert again == first and len(calls) == 4  # all from the cache
    data = json.loads(open(kt.cache_path(CPU, str(tmp_path))).read())
    assert data["version"] == kt.VERSION and data["kernels"] == first


def test_cache_keeps_what_cannot_run_alone_and_retries_what_ran_out_of_memory(
    tmp_path, monkeypatch
):
    def fake_time(node, device, value):
        name = str(node.target)
        if "convolution" in name:
            return None  # cannot run alone
        if "addmm" in name:
            raise kt.NoMemory("capped")
        return 1e-3

    monkeypatch.setattr(kt, "time_kernel", fake_time)
    table = kt.measure([_graph()], CPU, _value, str(tmp_path))
    assert sorted(table.values()) == [1e-3, 1e-3]  # mm and attention
    cached = kt.read_cache(kt.cache_path(CPU, str(tmp_path)))
    assert sorted(k.split("(")[0] for k, v in cached.items() if v is None) == [
        "aten.convolution.default"
    ]
    assert not any("addmm" in k for k in cached)  # timed again by a later process


def test_a_kernel_whose_tensors_pass_the_room_is_not_timed_nor_cached(tmp_path, monkeypatch):
    """memopt times kernels inside the step a byte budget caps: one whose inputs and outputs
    would not fit what is left under it keeps its roofline here and is timed by a later
    process (the cache does not record it). The graph's tensors: a 8x16 and b 16x4 fp32 make
    mm 512 + 256 + 128 bytes (output 8x4); the addmm reads b through a transpose of a
    contiguous copy, still 256 bytes, and adds its 16-byte bias."""
    monkeypatch.setattr(kt, "time_kernel", lambda node, device, value: 1e-3)
    g = _graph()
    need = {str(n.target): kt.device_bytes(n, _value, CPU) for n in g.graph.nodes if kt.timed(n)}
    assert need["aten.mm.default"] == 512 + 256 + 128
    assert need["aten.addmm.default"] == 16 + 512 + 256 + 128
    table = kt.measure([g], CPU, _value, str(tmp_path), room=900)
    cached = kt.read_cache(kt.cache_path(CPU, str(tmp_path)))
    assert sorted(k.split("(")[0] for k in table) == ["aten.mm.default"]
    assert sorted(k.split("(")[0] for k in cached) == ["aten.mm.default"]


def _world(monkeypatch, world: int, rank: int):
    """A process group of ``world`` ranks as seen by ``rank``, with an in-process store."""
    import torch.distributed as dist

    from memopt import _torch_compat as compat
    from memopt import ranks

    store = dist.HashStore()
    monkeypatch.setattr(ranks, "world_size", lambda: world)
    monkeypatch.setattr(ranks, "rank", lambda: rank)
    monkeypatch.setattr(compat, "default_store", lambda: store)
    monkeypatch.setattr(kt, "_noted", set())
    monkeypatch.setattr(kt, "_silent_leader", False)
    return store


def test_rank0_publishes_every_time_a_graph_needs_what_ran_out_of_memory_as_none(
    tmp_path, monkeypatch
):
    def fake_time(node, device, value):
        if "addmm" in str(node.target):
            raise kt.NoMemory("capped")
        return 1e-3

    g = _graph()
    sigs = list(kt.signatures([g], _value))
    kt.write_cache(kt.cache_path(CPU, str(tmp_path)), {sigs[0]: 5e-4})  # one from its cache
    store = _world(monkeypatch, 2, 0)
    monkeypatch.setattr(kt, "time_kernel", fake_time)
    kt.measure([g], CPU, _value, str(tmp_path))
    published = {s.split("(")[0]: json.loads(store.get(kt._key(s))) for s in sigs}
    assert published == {
        "aten.mm.default": 5e-4,  # from rank 0's cache
        "aten.addmm.default": None,  # out of memory: the other ranks use the roofline
        "aten.convolution.default": 1e-3,
        "aten._scaled_dot_product_flash_attention_for_cpu.default": 1e-3,
    }
    # out of memory under a cap is not cached: a later process times it
    assert not any("addmm" in k for k in kt.read_cache(kt.cache_path(CPU, str(tmp_path))))


def test_other_ranks_take_rank0s_times_whatever_their_own_cache_holds(tmp_path, monkeypatch):
    """Each rank may have a private cache dir (torchrun scripts often give one per rank): a
    follower reads rank 0's times from the store, not from a file."""
    g = _graph()
    sigs = list(kt.signatures([g], _value))
    kt.write_cache(kt.cache_path(CPU, str(tmp_path)), dict.fromkeys(sigs, 9e-4))  # its own
    store = _world(monkeypatch, 2, 1)
    for s in sigs:
        store.set(kt._key(s), json.dumps(None if "addmm" in s else 5e-4))
    monkeypatch.setattr(kt, "time_kernel", lambda *a: pytest.fail("a follower timed a kernel"))
    want = {s: 5e-4 for s in sigs if "addmm" not in s}
    assert kt.measure([g], CPU, _value, str(tmp_path)) == want


def test_a_follower_that_waits_in_vain_uses_the_roofline_and_says_so(tmp_path, monkeypatch, caplog):
    g = _graph()
    sigs = list(kt.signatures([g], _value))
    store = _world(monkeypatch, 2, 1)
    store.set(kt._key(sigs[0]), json.dumps(5e-4))
    monkeypatch.setattr(kt, "LEADER_WAIT_S", 0.3)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        assert kt.measure([g], CPU, _value, str(tmp_path)) == {sigs[0]: 5e-4}
    assert "3 kernel time(s) did not come from rank 0 in 0 s" in caplog.text
    # the next graph does not wait the full time again for a rank 0 that does not publish
    monkeypatch.setattr(kt, "LEADER_WAIT_S", 30.0)
    t0 = time.monotonic()
    assert kt.measure([g], CPU, _value, str(tmp_path)) == {sigs[0]: 5e-4}
    assert time.monotonic() - t0 < 5.0


def test_the_planner_prices_an_op_by_its_measured_time():
    mm = next(n for n in _graph().graph.nodes if "mm.default" in str(n.target))
    plain = op_cost(mm, Sizes(_value))
    assert plain.seconds is None and plain.flops == 2 * 8 * 16 * 4
    assert op_s(plain, CPU_DEFAULTS) == roofline_s(plain, CPU_DEFAULTS)
    table = {kt.signature(mm, _value): 0.25}
    timed = op_cost(mm, Sizes(_value, kernel_s=kt.lookup(table, _value)))
    assert timed.seconds == 0.25 and op_s(timed, CPU_DEFAULTS) == 0.25
    assert ops_s([timed, OpCost(bytes=10**10)], CPU_DEFAULTS) == 0.25 + 1.0


def test_the_roofline_counts_convolution_flops():
    """Forward: 2 * output elements * in-channels/groups * kernel area; backward: that for each
    gradient its output mask asks for (here input and weight)."""

    def f(x, w):
        return F.conv2d(x, w, padding=1, groups=1)

    g = make_fx(torch.func.grad(lambda x, w: f(x, w).sum(), argnums=(0, 1)), tracing_mode="fake")(
        torch.randn(2, 3, 8, 8), torch.randn(5, 3, 3, 3)
    )
    costs = {
        str(n.target): op_cost(n, Sizes(_value)).flops
        for n in g.graph.nodes
        if "convolution" in str(n.target)
    }
    fwd = 2 * (2 * 5 * 8 * 8) * (3 * 3 * 3)
    assert costs == {"aten.convolution.default": fwd, "aten.convolution_backward.default": 2 * fwd}


# --------------------------------------------------------------------------- reductions


def _reductions_graph():
    """What Inductor's decompositions leave of a layer norm (var_mean) and a softmax (amax,
    sum), a column sum as a bias gradient takes it, and a log-softmax left whole."""
    aten = torch.ops.aten

    def f(x, w, b, s):
        y = F.layer_norm(x, (16,), w, b)
        return y, s.softmax(-1), x.sum(0), torch.log_softmax(s, -1)

    dec = get_decompositions([aten.native_layer_norm, aten._softmax])
    args = (torch.randn(8, 16), torch.randn(16), torch.randn(16), torch.randn(2, 4, 6))
    return make_fx(f, decomposition_table=dec, tracing_mode="fake")(*args)


def test_reductions_are_timed_by_signature_and_their_pointwise_ops_are_not():
    g = _reductions_graph()
    assert list(kt.signatures([g], _value)) == [
        "aten.var_mean.correction(float32[8,16]s[16,1]@cpu,[1],correction=0,keepdim=True)",
        "aten.amax.default(float32[2,4,6]s[24,6,1]@cpu,[-1],True)",
        "aten.sum.dim_IntList(float32[2,4,6]s[24,6,1]@cpu,[-1],True)",
        "aten.sum.dim_IntList(float32[8,16]s[16,1]@cpu,[0])",
        "aten._log_softmax.default(float32[2,4,6]s[24,6,1]@cpu,-1,False)",
    ]
    ops = [n for n in g.graph.nodes if n.op == "call_function"]
    untimed = sorted({str(n.target) for n in ops if kt.signature(n, _value) is None})
    assert untimed == [
        "<built-in function getitem>",  # var_mean's outputs: the op is timed, once
        "aten.add.Tensor",
        "aten.div.Tensor",
        "aten.exp.default",
        "aten.mul.Tensor",
        "aten.rsqrt.default",
        "aten.sub.Tensor",
    ]
    # a pointwise op of a decomposed norm is of class "norm" (by its original op) and stays
    # on the roofline
    rsqrt = next(n for n in ops if n.target is torch.ops.aten.rsqrt.default)
    rsqrt.meta[mk.TORCH_ORIGINAL_ATEN] = torch.ops.aten.native_layer_norm.default
    assert facts.op_class(rsqrt) == "norm" and kt.signature(rsqrt, _value) is None


def test_norms_that_reach_the_graph_whole_run_alone_forward_and_backward():
    def f(x, w, b):
        return F.layer_norm(x, (16,), w, b).sum()

    g = make_fx(torch.func.grad(f, argnums=(0, 1, 2)), tracing_mode="fake")(
        torch.randn(8, 16), torch.randn(16), torch.randn(16)
    )
    nodes = kt.signatures([g], _value)
    assert [n.target for n in nodes.values()] == [
        torch.ops.aten.native_layer_norm.default,
        torch.ops.aten.sum.default,
        torch.ops.aten.native_layer_norm_backward.default,
    ]
    for n in nodes.values():
        t = kt.time_kernel(n, CPU, _value)
        assert t is not None and kt.PLAUSIBLE_S[0] <= t <= kt.PLAUSIBLE_S[1], n.target
    # the backward's incoming gradient is the loss's, expanded: made real with its strides
    # (filling it element by element would fail; version 1 left such kernels on the roofline)
    backward = list(nodes.values())[2]
    grad = kt.real_args(backward, CPU, _value)[0][0]
    assert grad.shape == (8, 16) and grad.stride() == (0, 0)


def test_reductions_run_alone_and_their_times_round_trip_through_the_cache(tmp_path, monkeypatch):
    g = _reductions_graph()
    first = kt.measure([g], CPU, _value, str(tmp_path))  # timed for real, on the CPU
    assert list(first) == list(kt.signatures([g], _value)) and len(first) == 5
    assert all(kt.PLAUSIBLE_S[0] <= t <= kt.PLAUSIBLE_S[1] for t in first.values())
    monkeypatch.setattr(kt, "time_kernel", lambda *a: pytest.fail("timed again"))
    assert kt.measure([g], CPU, _value, str(tmp_path)) == first
    assert kt.read_cache(kt.cache_path(CPU, str(tmp_path))) == first


class _Norm(torch.nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.up, self.norm = torch.nn.Linear(d, d), torch.nn.LayerNorm(d)
        self.down = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.down(self.norm(self.up(x))).sum()


def test_a_planning_problem_prices_reductions_by_their_measured_time(monkeypatch):
    """A layer norm between two linears (x: 512 x 64 fp32, 128 KiB), every reduction measured
    at 1 ms: the forward's var_mean and loss sum cost 1 ms in the step timeline, the same
    problem without measurements prices them by their bytes at 10 GB/s, and the recomputes
    that rerun var_mean carry its 1 ms. The norm's pointwise ops keep their roofline."""
    import memopt
    import memopt.passes.pipeline as pipeline
    import memopt.passes.plan_budget as pb
    from memopt import _torch_compat as compat

    seen = {}

    def measure(graphs, device, value, where, room=None, deferred=None):
        graphs = list(graphs)
        seen["joint"] = graphs[0]
        return {s: 1e-3 for s, n in kt.signatures(graphs, value).items() if facts.is_reduction(n)}

    build = pb.build_planning_problem

    def spy(joint, fw, bw, analysis, **kw):
        plain = {**kw, "sizes": Sizes(kw["value"])}
        seen.update(fw=fw, with_kernels=build(joint, fw, bw, analysis, **kw))
        seen["plain"] = build(joint, fw, bw, analysis, **plain)
        return seen["with_kernels"]

    monkeypatch.setattr(pipeline, "_device", lambda inputs: torch.device("cuda"))
    monkeypatch.setattr(pb, "device_rates", lambda device, budget=None: CPU_DEFAULTS)
    monkeypatch.setattr(pipeline, "measure_room", lambda device, budget=None: 1 << 40)
    monkeypatch.setattr(pipeline.kernel_times, "measure", measure)
    monkeypatch.setattr(pb, "build_planning_problem", spy)
    torch.manual_seed(0)
    with compat.no_compile_caches():
        memopt.optimize(_Norm(), budget=0.5)(torch.randn(512, 64)).backward()

    joint = [n for n in seen["joint"].graph.nodes if n.op == "call_function"]
    norm_pointwise = [n for n in joint if facts.op_class(n) == "norm" and not facts.is_reduction(n)]
    assert norm_pointwise and all(kt.signature(n, _value) is None for n in norm_pointwise)
    ops = [n for n in seen["fw"].graph.nodes if n.op == "call_function"]
    timed, plain = seen["with_kernels"].timeline.fwd_op_s, seen["plain"].timeline.fwd_op_s
    moved = [i for i in range(len(ops)) if timed[i] != plain[i]]
    assert [str(ops[i].target) for i in moved] == ["aten.var_mean.correction", "aten.sum.default"]
    assert [timed[i] for i in moved] == [1e-3, 1e-3]
    # var_mean reads x and writes mean and variance (512 fp32 each); the loss sum reads the
    # output and writes one fp32
    assert [plain[i] for i in moved] == [
        (512 * 64 * 4 + 2 * 512 * 4) / 10e9,
        (512 * 64 * 4 + 4) / 10e9,
    ]
    recomputes = {
        c.name: [op.seconds for op in c.recompute_ops] for c in seen["with_kernels"].candidates
    }
    assert recomputes == {
        "addmm": [None, None],
        "getitem_1": [1e-3, None],  # the inverse standard deviation: var_mean, rsqrt
        "rsqrt": [1e-3, None, None, None],
        # the norm's output, pointwise from what the backward's norm kernels read anyway:
        # priced as one kernel of that group (build_planning_problem._fused_ops)
        "add_1": [None],
    }
