"""The budget planner's memory model against what really is live (issue 16: predicted peak
within 3%). Exact bytes on hand-built graphs and on one small compiled MLP.

Units: a 1024 x 1024 bf16 tensor is 2 MiB (2,097,152 B); padded to 1008 columns of 1001, a
1024 x 1001 operand is 2,064,384 B.
"""

from __future__ import annotations

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from memopt.cli.liveness import step_profile
from memopt.passes.build_planning_problem import Sizes, base_items, pads_in_graph
from memopt.symbolic import SymbolTable

aten = torch.ops.aten
MM_OUT = 1024 * 1024 * 2
PADDED = 1024 * 1008 * 2  # a (1024, 1001) or (1001, 1024) bf16 operand padded to 1008


def _val(shape, device: str, dtype=torch.bfloat16):
    meta = torch.empty(shape, dtype=dtype, device="meta")
    if device == "meta":
        return meta
    return FakeTensor(FakeTensorMode(), meta, torch.device(device))


def _lm_head_graphs(device: str) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """A forward ``mm`` with an unaligned, compute-bound K (Inductor's ``pad_mm`` pads both
    operands on CUDA) and a one-op backward."""
    fw = torch.fx.Graph()
    a, b = fw.placeholder("a"), fw.placeholder("b")
    mm = fw.call_function(aten.mm.default, (a, b))
    fw.output((mm,))
    bw = torch.fx.Graph()
    t = bw.placeholder("tangents_1")
    neg = bw.call_function(aten.neg.default, (t,))
    bw.output((neg,))
    for node, shape in ((a, (1024, 1001)), (b, (1001, 1024)), (mm, (1024, 1024))):
        node.meta["val"] = _val(shape, device)
    t.meta["val"] = neg.meta["val"] = _val((1024, 1024), device)
    return torch.fx.GraphModule({}, fw), torch.fx.GraphModule({}, bw)


def _fw_peak(device: str) -> tuple[int, int]:
    """(planner's forward bytes, memopt plan's forward phase) with ``pad_matmuls`` on."""
    fw, bw = _lm_head_graphs(device)
    sizes = Sizes(lambda e: int(e))
    fw_ops, fw_items, _, _ = base_items(fw, bw, [], sizes, pad_matmuls=True)
    planner = sum(it.nbytes for it in fw_items if it.start <= 0 <= it.end)
    cli = step_profile(fw, bw, 1, SymbolTable.empty(), pad_matmuls=True)
    return planner, int(cli.phases["forward"].total)


def test_padded_copies_are_predicted_where_inductor_did_not_pad():
    # traced on CPU tensors (memopt plan emulating a GPU): pad_mm did not run; both models
    # add the two padded operand copies beside the product
    assert not pads_in_graph(_lm_head_graphs("meta")[0])
    assert _fw_peak("meta") == (MM_OUT + 2 * PADDED,) * 2 == (6_225_920, 6_225_920)


def test_pads_inductor_made_on_cuda_are_not_counted_again():
    """On CUDA, pad_mm runs among Inductor's joint-graph passes, before the partitioner: the
    pads it chose are nodes of the graph, and a matmul left unaligned is one its benchmark kept
    unpadded. Before, both models added rule-made copies on top (BERT at GPU size, H100: one
    500 MB copy of the LM head's gradient at the backward peak; ViT: two 164 MB copies)."""
    assert pads_in_graph(_lm_head_graphs("cuda")[0])
    assert _fw_peak("cuda") == (MM_OUT, MM_OUT)


class _Mlp(torch.nn.Module):
    """h = gelu(x W1^T); the backward reads h (its saved activation) and gelu's input."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256, bias=False)
        self.mid = torch.nn.Linear(256, 256, bias=False)
        self.down = torch.nn.Linear(256, 64, bias=False)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.up(x))
        return self.down(torch.relu(self.mid(h)) + h).sum()


def test_a_recomputed_tensor_lives_in_the_forward_until_its_last_reader(monkeypatch):
    """``last_fwd_use_pos`` is the last forward kernel that reads the storage, not the
    position of its last alias: recomputed, ``h`` (512 x 256 fp32, 512 KiB) is still read by
    the residual add after ``mid``'s matmul, and lives until then. Before, the planner freed it
    right where it was made and predicted 512 KiB too little between the two reads."""
    import memopt
    import memopt.passes.plan_budget as pb
    from memopt import _torch_compat as compat
    from memopt.plan import Strategy
    from memopt.planner import memory_profile

    seen = {}
    build = pb.build_planning_problem

    def spy(joint, fw, bw, analysis, **kw):
        seen.update(fw=fw, problem=build(joint, fw, bw, analysis, **kw))
        return seen["problem"]

    monkeypatch.setattr(pb, "build_planning_problem", spy)
    torch.manual_seed(0)
    model = _Mlp()
    with compat.no_compile_caches():
        memopt.optimize(model, budget=1.0)(torch.randn(512, 64)).backward()
    problem, fw = seen["problem"], seen["fw"]
    ops = [n for n in fw.graph.nodes if n.op == "call_function"]
    (gelu_out,) = problem.clusters["Gelu+"]
    h = next(n for n in ops if n.name == gelu_out.name)
    residual = next(u for u in h.users if u.target is aten.add.Tensor)
    assert gelu_out.nbytes == 512 * 256 * 4
    assert gelu_out.fwd_last == ops.index(residual) > ops.index(h) + 1 == gelu_out.produce_pos + 1
    keep = memory_profile(problem, {}).curve
    rec = memory_profile(problem, {gelu_out.name: Strategy.RECOMPUTE}).curve
    # recomputed, it is live in the forward exactly as kept, and gone from then to its
    # first backward read
    nf = problem.timeline.n_fwd
    assert rec[: gelu_out.fwd_last + 1] == keep[: gelu_out.fwd_last + 1]
    gap = range(gelu_out.fwd_last + 1, nf + gelu_out.first_bwd_use_pos)
    assert gap and all(keep[t] - rec[t] == 512 * 256 * 4 for t in gap)


def test_a_recomputed_tensor_inductor_fuses_takes_no_forward_memory():
    """Not saved, a tensor whose forward readers are all pointwise kernels is never written:
    recomputed, it is live only from its first backward read (1 MiB at positions 5..6)."""
    from memopt.plan import Strategy
    from memopt.planner import memory_profile
    from memopt.planner.problem import Candidate, PlanningProblem, StepTimeline

    def curve(fused: bool) -> tuple[int, ...]:
        c = Candidate(
            name="gelu", cluster_id="Gelu+", occurrence=0, layer=None, nbytes=1 << 20,
            produce_pos=1, last_fwd_use_pos=2, first_bwd_use_pos=1, last_bwd_use_pos=2,
            recomputable=True, fused_unless_saved=fused,
        )  # fmt: skip
        tl = StepTimeline(fwd_op_s=(0.0,) * 4, bwd_op_s=(0.0,) * 4, fwd_live_bytes=(0,) * 4,
                          bwd_live_bytes=(0,) * 4)  # fmt: skip
        return memory_profile(
            PlanningProblem(candidates=(c,), timeline=tl), {"gelu": Strategy.RECOMPUTE}
        ).curve

    assert curve(False) == (0, 1 << 20, 1 << 20, 0, 0, 1 << 20, 1 << 20, 0)
    assert curve(True) == (0, 0, 0, 0, 0, 1 << 20, 1 << 20, 0)


def _embedding_backward_graphs() -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The embedding backward as Inductor's decomposition writes it (fp32 zeros, an
    accumulating ``index_put``, a cast to bf16), after a backward that reads its tangent at
    its first op and then runs one more op."""
    fw = torch.fx.Graph()
    ids = fw.placeholder("ids")
    fw.output((ids,))
    bw = torch.fx.Graph()
    ids_b, t = bw.placeholder("ids"), bw.placeholder("tangents_1")
    g = bw.call_function(aten.mm.default, (t, t))  # the tangent's only read
    g32 = bw.call_function(aten._to_copy.default, (g,), {"dtype": torch.float32})
    zeros = bw.call_function(aten.full.default, ([4096, 256], 0.0), {"dtype": torch.float32})
    acc = bw.call_function(aten.index_put.default, (zeros, [ids_b], g32, True))
    out = bw.call_function(aten._to_copy.default, (acc,), {"dtype": torch.bfloat16})
    bw.output((out,))
    ids.meta["val"] = ids_b.meta["val"] = _val((256,), "meta", torch.int64)
    t.meta["val"] = g.meta["val"] = _val((256, 256), "meta")
    g32.meta["val"] = _val((256, 256), "meta", torch.float32)
    zeros.meta["val"] = acc.meta["val"] = _val((4096, 256), "meta", torch.float32)
    out.meta["val"] = _val((4096, 256), "meta")
    return torch.fx.GraphModule({}, fw), torch.fx.GraphModule({}, bw)


def _bw_live(monkeypatch, held: bool) -> list[tuple[str, str, int, int, int]]:
    from memopt import _torch_compat as compat

    monkeypatch.setattr(compat, "tangents_held_to_the_end", lambda: held)
    fw, bw = _embedding_backward_graphs()
    _, _, _, items = base_items(fw, bw, [], Sizes(lambda e: int(e)))
    return sorted((it.name, it.kind, it.start, it.end, it.nbytes) for it in items)


def test_the_embedding_backward_zeros_are_the_scatter_buffer(monkeypatch):
    """Inductor lowers ``index_put(full(...), ...)`` into one buffer: the zeros are written
    into the scatter's output, which accumulates in place. Before, both were counted at the
    scatter (Qwen2's 933 MB fp32 embedding gradient twice, H100 memory history)."""
    live = _bw_live(monkeypatch, held=False)
    assert [x for x in live if x[0] in ("full_default", "index_put_default")] == [
        ("index_put_default", "temporary", 3, 4, 4096 * 256 * 4)
    ]


def test_tangents_live_to_their_last_read_or_to_the_end_of_the_backward(monkeypatch):
    """Torch 2.13 frees a tangent after its last read (the mm at 0); torch 2.11's autograd
    holds it until the compiled backward returns (position 4, the last op), as the zero
    gradient of HF's unread logits did on the H100 (benchmarks/diag_tangents.py)."""
    tangent = [("tangents_1", "tangent", 0, 0, 256 * 256 * 2)]
    assert [x for x in _bw_live(monkeypatch, held=False) if x[1] == "tangent"] == tangent
    held = [("tangents_1", "tangent", 0, 4, 256 * 256 * 2)]
    assert [x for x in _bw_live(monkeypatch, held=True) if x[1] == "tangent"] == held


def _tied_head_backward(user_pointwise: bool = False) -> torch.fx.GraphModule:
    """A tied LM head's weight gradient, FX order: the logits gradient's matmul right after it
    is made, three more ops, then the sum with the embedding's gradient (Inductor's post-grad
    pass makes the two one ``addmm`` where the add runs)."""
    bw = torch.fx.Graph()
    t, h, e = bw.placeholder("tangents_1"), bw.placeholder("h"), bw.placeholder("emb_grad")
    g = bw.call_function(aten.mul.Tensor, (t, 2.0))  # the logits' gradient (1024 x 1024)
    gt = bw.call_function(aten.t.default, (g,))
    mm = bw.call_function(aten.mm.default, (gt, h))
    other = bw.call_function(aten.mm.default, (h, h))  # unrelated work between
    add = bw.call_function(aten.add.Tensor, (mm, e))
    last = bw.call_function(aten.neg.default, (add,)) if user_pointwise else add
    bw.output((last, other))
    for node in (t, h, e, g, gt, mm, other, add, last):
        node.meta["val"] = _val((1024, 1024), "meta")
    return torch.fx.GraphModule({}, bw)


def test_a_matmul_added_to_a_tensor_runs_as_addmm_where_the_add_is():
    from memopt import _torch_compat as compat
    from memopt import memory_rules as rules

    bw = _tied_head_backward()
    g, gt, mm, other, add = [n for n in bw.graph.nodes if n.op == "call_function"]
    assert rules.addmm_parts(add) == (mm, bw.graph.find_nodes(op="placeholder")[2])
    assert rules.deferred_mm(mm) and not rules.deferred_mm(other)
    assert not rules.must_exist(mm, [add]) and not rules.fusible(add)
    reads = rules.ReadPoints({n: i for i, n in enumerate((g, gt, mm, other, add))})
    # the logits' gradient is read by the addmm at position 4, not by the mm at 2
    assert reads.last(list(g.users), 0) == 4 and reads.at(mm) == 4
    fw = torch.fx.Graph()
    fw.output(())
    _, _, _, items = base_items(torch.fx.GraphModule({}, fw), bw, [], Sizes(int))
    live = sorted((it.name, it.start, it.end) for it in items if it.kind == "temporary")
    assert live == [("mul_tensor", 0, 4)]  # no mm output; the sum is the graph's output
    # on a GPU, a sum whose every use is pointwise stays a matmul and an add
    pointwise = _tied_head_backward(user_pointwise=True)
    add2 = [n for n in pointwise.graph.nodes if n.target is aten.add.Tensor][0]
    assert rules.addmm_parts(add2) is not None  # the CPU always fuses
    with compat.planning_for_cuda():
        assert rules.addmm_parts(add2) is None and rules.fusible(add2)
    # an operand of another dtype, or a second reader of the matmul: no addmm
    gt.meta["val"] = _val((1024, 1024), "meta", torch.float32)
    assert rules.addmm_parts(add) is None
    gt.meta["val"] = _val((1024, 1024), "meta")
    assert rules.addmm_parts(add) is not None
    with bw.graph.inserting_after(add):
        bw.graph.call_function(aten.neg.default, (mm,))
    assert rules.addmm_parts(add) is None and not rules.deferred_mm(mm)


def test_under_cuda_graphs_a_tangent_has_a_copy_in_the_graphs_pool(monkeypatch):
    """cudagraph trees copy a captured graph's inputs made outside it into the graph's pool:
    the recording step of the zoo Llama on an H100 held its 500 MiB logits tangent twice
    (docs/benchmarks.md, fifty-sixth session). Under CUDA graphs the model counts the copy,
    live through the whole backward, beside the tangent itself."""
    from memopt import _torch_compat as compat

    monkeypatch.setattr(compat, "tangents_held_to_the_end", lambda: False)
    fw, bw = _embedding_backward_graphs()
    nbytes = 256 * 256 * 2

    def kinds(cuda_graphs: bool) -> list:
        _, _, _, items = base_items(fw, bw, [], Sizes(int), cuda_graphs=cuda_graphs)
        return sorted(
            (it.kind, it.start, it.end, it.nbytes) for it in items if it.name == "tangents_1"
        )

    assert kinds(False) == [("tangent", 0, 0, nbytes)]
    assert kinds(True) == [("graph input copy", 0, 4, nbytes), ("tangent", 0, 0, nbytes)]
