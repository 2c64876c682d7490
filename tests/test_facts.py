"""memopt.facts: the graph facts every pass reads, on hand-built graphs (exact answers)."""

import operator

import sympy
import torch
import torch.fx as fx

from memopt import facts
from memopt.meta_keys import LAYER
from memopt.passes.build_planning_problem import Sizes

aten = torch.ops.aten


def _graph():
    """x -> mm -> view -> t -> relu -> split -> getitem; detach of the relu."""
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    mm = g.call_function(aten.mm.default, (x, w))
    v = g.call_function(aten.view.default, (mm, [8, 2]))
    t = g.call_function(aten.t.default, (v,))
    r = g.call_function(aten.relu.default, (t,))
    sp = g.call_function(aten.split.Tensor, (r, 4))
    gi = g.call_function(operator.getitem, (sp, 1))
    d = g.call_function(aten.detach.default, (r,))
    g.output((gi, d))
    vals = {x: torch.empty(4, 4), w: torch.empty(4, 4), mm: torch.empty(4, 4)}
    vals.update({v: torch.empty(8, 2), t: torch.empty(2, 8), r: torch.empty(2, 8)})
    vals.update({gi: torch.empty(2, 4), d: torch.empty(2, 8)})
    for n, val in vals.items():
        n.meta["val"] = val
    return fx.GraphModule(torch.nn.Module(), g), (x, w, mm, v, t, r, sp, gi, d)


def test_storage_roots_and_aliases():
    gm, (x, w, mm, v, t, r, sp, gi, d) = _graph()
    assert [facts.storage_root(n) for n in (mm, v, t, r, gi, d)] == [mm, mm, mm, r, r, r]
    assert facts.is_view(gi) and not facts.is_view(d)  # detach aliases by its schema
    assert facts.aliased_input(d) is r and facts.aliased_input(r) is None
    assert set(facts.alias_users(mm)) == {v, t, r}
    assert set(facts.alias_users(r)) == {sp, gi, d, gm.graph.output_node()}


def test_every_split_is_a_view_of_its_input():
    """``torch.split`` with a list of sizes is ``split_with_sizes`` in the graph (DeepSeek-V3's
    MLA saves such pieces: counted as the pieces, its estimate was 81,920 B short of the
    storages they keep alive)."""
    for op, sizes in (
        (aten.split_with_sizes.default, [3, 5]),
        (aten.split.Tensor, 4),
        (aten.tensor_split.sections, 2),
        (aten.unsafe_split.Tensor, 4),
        (aten.unsafe_split_with_sizes.default, [3, 5]),
    ):
        g = fx.Graph()
        x = g.placeholder("x")
        r = g.call_function(aten.relu.default, (x,))
        sp = g.call_function(op, (r, sizes))
        gi = g.call_function(operator.getitem, (sp, 1))
        g.output((gi,))
        assert facts.is_view(gi) and facts.storage_root(gi) is r, op


def test_op_classes_and_matmul_operands():
    _, (x, w, mm, v, t, r, sp, gi, d) = _graph()
    assert [facts.op_class(n) for n in (mm, v, r, gi)] == ["matmul", "view", "pointwise", "view"]
    assert facts.is_matmul(mm) and not facts.is_matmul(r)
    assert facts.MATMUL_OPERANDS["addmm"] == (1, 2)


def test_sizes_known_symbolic_and_unknown():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    with FakeTensorMode(shape_env=env):
        u = env.create_unbacked_symint()
        t = torch.empty(u, 4, dtype=torch.bfloat16)
    assert facts.nbytes(torch.empty(3, 5), lambda e: None) == 60  # static: no evaluation
    expr = facts.nbytes_expr(t)
    assert expr == 8 * u.node.expr and facts.nbytes(t, lambda e: None) is None

    def value(e):
        return None if sympy.sympify(e).free_symbols else int(e)

    g = fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    a.meta["val"], b.meta["val"] = t, torch.empty(2, 2)
    sizes = Sizes(value)
    assert (sizes.of(a), sizes.of(b)) == (0, 16) and sizes.unknown == {"a"}


def test_layer_starts_skip_stray_ops_of_a_layer():
    g = fx.Graph()
    x = g.placeholder("x")
    ops = []
    # backward order 2, 1, 0 with one op of layer 0 running early (between layers 2 and 1)
    for tag in (None, 2, 2, 0, 2, 1, 1, 0, 0):
        x = g.call_function(aten.neg.default, (x,))
        x.meta[LAYER], x.meta["val"] = tag, torch.empty(1)
        ops.append(x)
    assert facts.layer_starts(ops, forward=False) == {2: 1, 1: 5, 0: 7}
    assert facts.layer_starts(ops[:3], forward=True) == {2: 1}
    # a view of a graph input (a weight transpose) does not start a layer
    w = g.placeholder("w")
    w.meta["val"] = torch.empty(2, 2)
    wt = g.call_function(aten.t.default, (w,))
    wt.meta[LAYER], wt.meta["val"] = 3, torch.empty(2, 2)
    y = g.call_function(aten.neg.default, (x,))
    y.meta[LAYER], y.meta["val"] = 3, torch.empty(1)
    assert facts.layer_starts([wt, y], forward=True) == {3: 1}


def _softmax_saved(shape):
    """x -> bmm (an extern kernel) -> exp (Inductor's own buffer) -> div: the forward returns
    the sum and saves the bmm output and the probabilities."""
    g = fx.Graph()
    x = g.placeholder("x")
    mm = g.call_function(aten.bmm.default, (x, x))
    e = g.call_function(aten.exp.default, (mm,))
    s = g.call_function(aten.sum.dim_IntList, (e, [-1], True))
    p = g.call_function(aten.div.Tensor, (e, s))
    total = g.call_function(aten.sum.default, (p,))
    g.output((total, mm, p))
    n, m = shape[0], shape[1]
    for node, val in [(x, (n, m, m)), (mm, (n, m, m)), (e, (n, m, m)), (p, (n, m, m))]:
        node.meta["val"] = torch.empty(val)
    s.meta["val"], total.meta["val"] = torch.empty(n, m, 1), torch.empty(())
    return fx.GraphModule(torch.nn.Module(), g)


def test_cuda_pads_the_strides_of_the_buffers_inductor_lays_out():
    # the CUDA zoo's ViT, DeiT and BEiT misses: the attention probabilities (32 matrices of
    # 18 x 18, a batch stride of 324 x 4 = 1,296 elements over the 1,024 threshold) are
    # allocated with a stride of 1,312 (a multiple of 128 B): 41,920 B, not 41,472
    from memopt import _torch_compat as compat

    gm = _softmax_saved((32, 18))
    plain = 2 * 32 * 18 * 18 * 4
    assert facts.saved_activation_bytes(gm, 1) == plain  # a CPU graph: never padded
    with compat.planning_for_cuda():
        # as (32, 18, 18) no stride passes the threshold (324); the bmm's output is an
        # extern kernel's, never padded
        assert facts.saved_activation_bytes(gm, 1) == plain
    gm4 = _softmax_saved((32, 18))
    for node in gm4.graph.nodes:
        v = node.meta.get("val")
        if isinstance(v, torch.Tensor) and v.dim() == 3:
            node.meta["val"] = torch.empty(8, 4, 18, 18)
    with compat.planning_for_cuda():
        padded = ((8 - 1) * 1312 + 1296) * 4
        assert padded == 41_920 and facts.saved_activation_bytes(gm4, 1) == plain // 2 + padded
    small = _softmax_saved((32, 8))
    with compat.planning_for_cuda():  # every stride under the threshold: nothing padded
        assert facts.saved_activation_bytes(small, 1) == 2 * 32 * 8 * 8 * 4
