"""The analysis passes and the decision logic on small hand-built graphs (exact tags, bytes)."""

from __future__ import annotations

import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from memopt import meta_keys as mk
from memopt._torch_compat import CheckpointPolicy
from memopt.candidates import SavedActivation
from memopt.decide import decide
from memopt.errors import PlanError
from memopt.naming import cluster_id
from memopt.passes.apply_recompute import apply_recompute_pass
from memopt.passes.cluster_subgraphs import cluster_subgraphs_pass
from memopt.passes.find_recompute_subgraphs import find_recompute_subgraphs_pass
from memopt.passes.find_saved_activations import find_saved_activations_pass
from memopt.plan import PlanSpec, Strategy
from memopt.symbolic import SymbolTable

aten = torch.ops.aten


def _trace(fn, *args):
    gm = make_fx(fn)(*args)
    FakeTensorProp(gm).propagate(*args)
    return gm


def _analyze(gm, saved, probe_level=1):
    gm, groups = find_saved_activations_pass(gm, saved)
    gm, subs = find_recompute_subgraphs_pass(gm, groups, probe_level=probe_level, max_nodes=64)
    gm, cands = cluster_subgraphs_pass(gm, subs, SymbolTable.empty())
    return gm, groups, cands


def test_compromise_stashes_the_smaller_pre_cast_tensor():
    def f(a):
        y = torch.cumsum(a, 0)  # not in the allow-list: full recompute is impossible
        c = y.float()  # widening cast bf16 -> fp32
        return (c * 2.0).sin()

    a = torch.randn(64, 256, dtype=torch.bfloat16)  # 64x256 bf16 = 32 KiB; fp32 = 64 KiB
    gm = _trace(f, a)
    names = {n.target: n.name for n in gm.graph.nodes if n.op == "call_function"}
    mul = names[aten.mul.Tensor]
    gm, _, cands = _analyze(gm, [mul])
    (c,) = cands
    assert c.root == mul and c.cluster_id == "Cast+Mul+"
    assert c.excluded_reason == "op cumsum (other) is not in the probe-level allow-list"
    assert c.savings == {Strategy.COMPROMISE: sympy.Integer(64 * 256 * 4 - 64 * 256 * 2)}
    assert c.default_strategy == Strategy.COMPROMISE
    cumsum = names[aten.cumsum.default]
    assert c.boundary[Strategy.COMPROMISE] == (cumsum,)

    d = decide(cands, level=0, plans=[PlanSpec("Cast+Mul+", Strategy.COMPROMISE, -1)])
    assert d.per_root == {mul: Strategy.COMPROMISE}
    assert d.clusters[0].saving == 32768
    apply_recompute_pass(gm, cands, d.per_root)
    tags = {n.name: n.meta.get(mk.TORCH_RECOMPUTE) for n in gm.graph.nodes}
    assert tags[cumsum] == CheckpointPolicy.MUST_SAVE
    assert tags[mul] == CheckpointPolicy.MUST_RECOMPUTE
    assert tags[names[aten._to_copy.default]] == CheckpointPolicy.MUST_RECOMPUTE
    # level 1 does not apply compromise clusters; level 2 does
    assert decide(cands, level=1, plans=[]).per_root == {}
    assert decide(cands, level=2, plans=[]).per_root == {mul: Strategy.COMPROMISE}


def test_saved_view_and_base_are_one_storage():
    def f(x, w):
        h = torch.mm(x, w)  # 512x512 fp32 = 1 MiB
        return h.relu(), h.view(-1)

    x, w = torch.randn(512, 64), torch.randn(64, 512)
    gm = _trace(f, x, w)
    mm = next(n for n in gm.graph.nodes if n.target is aten.mm.default)
    view = next(n for n in gm.graph.nodes if n.target is aten.view.default)
    gm, groups, cands = _analyze(gm, [mm.name, view.name, "x_1"])
    assert len(groups) == 1 and groups[0].root is mm and set(groups[0].members) == {mm, view}
    (c,) = cands
    assert c.nbytes == 2**20  # counted once
    assert c.cluster_id == "MatMul+"
    assert c.recompute_nodes[Strategy.RECOMPUTE] == (mm.name, view.name)


def test_probe_level0_excludes_matmul():
    def f(x, w):
        return torch.mm(x, w).relu()

    gm = _trace(f, torch.randn(8, 8), torch.randn(8, 8))
    mm = next(n for n in gm.graph.nodes if n.target is aten.mm.default)
    _, _, cands = _analyze(gm, [mm.name], probe_level=0)
    assert cands[0].cluster_id is None
    assert cands[0].excluded_reason == "op mm (matmul) is not in the probe-level allow-list"


def test_bias_gelu_name_from_add_of_1d_bias():
    def f(x, w, b):
        return torch.nn.functional.gelu(torch.mm(x, w) + b)

    gm = _trace(f, torch.randn(4, 8), torch.randn(8, 16), torch.randn(16))
    nodes = [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target is not aten.mm.default
    ]
    assert cluster_id(nodes) == "BiasGelu+"  # the bias Add is absorbed into the name
    gelu_only = [n for n in nodes if n.target is aten.gelu.default]
    assert cluster_id(gelu_only) == "BiasGelu+"


def _cand(root, cid, occ, nbytes, boundary, members=()):
    return SavedActivation(
        root=root,
        members=members or (root,),
        cluster_id=cid,
        occurrence=occ,
        nbytes=sympy.Integer(nbytes),
        savings={Strategy.RECOMPUTE: sympy.Integer(nbytes)},
        recompute_nodes={Strategy.RECOMPUTE: (root,)},
        boundary={Strategy.RECOMPUTE: tuple(boundary)},
    )


def test_recompute_chains_are_bounded_to_depth_two():
    # A residual stream: r1 <- r0 (saved), r2 <- r1, r3 <- r2, r4 <- r3 (each 1 MiB)
    mib = 2**20
    cands = [_cand(f"r{i}", "Add+", i - 1, mib, [f"r{i - 1}"]) for i in range(1, 5)]
    d = decide(cands, level=1, plans=[], value=lambda e: int(e))
    # r1 (depth 1), r2 (depth 2) accepted; r3 would be depth 3: kept; r4 reads the saved r3
    assert d.per_root == {
        "r1": Strategy.RECOMPUTE,
        "r2": Strategy.RECOMPUTE,
        "r4": Strategy.RECOMPUTE,
    }
    (cd,) = d.clusters
    assert (cd.freq, cd.skipped, cd.saving) == (4, 1, 3 * mib)


def test_explicit_plan_first_n_and_keep_override():
    cands = [_cand(f"g{i}", "BiasGelu+", i, 100, [f"x{i}"]) for i in range(3)]
    cands.append(_cand("m0", "Gemm+", 0, 500, ["y"]))
    d = decide(
        cands,
        level=1,
        plans=[PlanSpec("BiasGelu+", Strategy.RECOMPUTE, 2), PlanSpec("Gemm+", Strategy.KEEP, -1)],
    )
    assert d.per_root == {"g0": Strategy.RECOMPUTE, "g1": Strategy.RECOMPUTE}
    by = {c.cluster_id: c for c in d.clusters}
    assert by["BiasGelu+"].saving == 200 and by["BiasGelu+"].source == "plan"
    assert not by["Gemm+"].enabled and by["Gemm+"].potential == 500


def test_saved_ids_name_tensors_without_a_cluster():
    # The budget planner names a saved tensor no cluster can recompute Saved_<root>+; a frozen
    # plan may offload (3) or keep (0) it by that id, never recompute it.
    plain = SavedActivation(
        root="getitem_9", members=("getitem_9",), cluster_id=None, occurrence=-1,
        nbytes=sympy.Integer(700),
    )  # fmt: skip
    cands = [_cand("g0", "BiasGelu+", 0, 100, ["x0"]), plain]
    off = [PlanSpec("Saved_getitem_9+", Strategy.OFFLOAD, -1)]
    d = decide(cands, level=0, plans=off, layer_names=("h.0", "h.1", "h.2"))
    assert d.per_root == {"getitem_9": Strategy.OFFLOAD} and not d.warnings
    # strategy-3 tensors move on the default schedule for n-1 layers
    assert d.sync == {0: (True, 1, False, 2), 1: (True, 2, False, 1)} and d.num_layers == 3
    assert d.frozen() == {"config": ["Saved_getitem_9+:3:-1"], "sync": {
        "0": [True, 1, False, 2], "1": [True, 2, False, 1]}}  # fmt: skip
    # without repeated layers the offload cannot apply: the plan says so
    d = decide(cands, level=0, plans=off)
    assert d.sync is None and "no repeated layers" in d.warnings[0]
    by = {c.cluster_id: c for c in d.clusters}
    saved = by["Saved_getitem_9+"]
    assert (saved.freq, saved.saving, saved.available) == (1, 700, ())
    assert "Saved_getitem_9+" not in {
        c.cluster_id for c in decide(cands, level=0, plans=[]).clusters
    }
    d = decide(cands, level=0, plans=[PlanSpec("Saved_getitem_9+", Strategy.RECOMPUTE, -1)])
    assert d.per_root == {} and d.sync is None
    assert "does not support strategy 1" in d.warnings[0]
    with pytest.raises(PlanError, match="Saved_getitem_9\\+.*does not support strategy 1"):
        decide(
            cands, level=0, plans=[PlanSpec("Saved_getitem_9+", Strategy.RECOMPUTE, -1)],
            strict=True,
        )  # fmt: skip
    # a clustered tensor has no Saved_ id
    d = decide(cands, level=0, plans=[PlanSpec("Saved_g0+", Strategy.OFFLOAD, -1)])
    assert d.per_root == {} and d.unknown_plans == ("Saved_g0+:3:-1",)


def test_recompute_reads_name_the_candidates_a_recompute_reads():
    # what the planner needs to know decide's chain rule: b's recompute reads a (through
    # a's tensor), c reads b's view and a; x is a graph input, no candidate's
    from memopt.passes.build_planning_problem import recompute_reads

    cands = [
        _cand("a", "A+", 0, 10, ["x"]),
        _cand("b", "B+", 0, 10, ["a"], members=("b", "bv")),
        _cand("c", "C+", 0, 10, ["bv", "a", "c"]),
    ]
    assert recompute_reads(cands) == {
        "a": {Strategy.RECOMPUTE: ()},
        "b": {Strategy.RECOMPUTE: ("a",)},
        "c": {Strategy.RECOMPUTE: ("a", "b")},
    }
