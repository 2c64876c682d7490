"""insert_offload_pass on hand-built forward/backward graphs that save two views of one matmul
output (interleaved halves, like q/k/v slices of one projection)."""

import copy

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from memopt.meta_keys import LAYER
from memopt.offload import ops
from memopt.passes.insert_offload import insert_offload_pass
from tests.offload_check import check_offload, op_sequence

N, D = 64, 32
aten = torch.ops.aten


def _fw(x, w0, w1):
    y = x @ w0  # layer 0
    a, b = y.chunk(2, -1)
    h = a * b
    z = h @ w1  # layer 1
    return z.sum(), a, b, h, x, w1


def _fw_returning_y(x, w0, w1):
    y = x @ w0
    a, b = y.chunk(2, -1)
    h = a * b
    z = h @ w1
    return z.sum(), y, a, b, h, x, w1


def _bw(a, b, h, x, w1, g):
    gz = g.expand(h.shape[0], w1.shape[1])
    gh = gz @ w1.t()  # layer 1
    gw1 = h.t() @ gz
    gy = torch.cat([gh * b, gh * a], -1)  # layer 0
    gw0 = x.t() @ gy
    return gw0, gw1


def _rename_placeholders(gm: fx.GraphModule, names: list[str]) -> fx.GraphModule:
    """The partitioner names a saved value's backward placeholder like its forward node."""
    g, env = fx.Graph(), {}
    for ph, name in zip(gm.graph.find_nodes(op="placeholder"), names):
        env[ph] = g.placeholder(name)
        env[ph].meta = dict(ph.meta)
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            env[n] = g.node_copy(n, lambda a: env[a])
    return fx.GraphModule(gm, g)


def _graphs(fw=_fw):
    with FakeTensorMode():
        x, w0, w1 = torch.empty(N, D), torch.empty(D, 2 * D), torch.empty(D, D)
        fw_gm = make_fx(fw)(x, w0, w1)
        half = torch.empty(N, 2 * D)
        bw_gm = make_fx(_bw)(half[:, :D], half[:, D:], torch.empty(N, D), x, w1, torch.empty(()))
    bw_gm = _rename_placeholders(
        bw_gm, ["getitem", "getitem_1", "mul", "x_1", "w1_1", "tangents_1"]
    )
    fw_layers = {"mm": 0, "split": 0, "getitem": 0, "getitem_1": 0, "mul": 0, "mm_1": 1, "sum_1": 1}
    for n in fw_gm.graph.nodes:
        n.meta[LAYER] = fw_layers.get(n.name)
    bw_layers = {"expand": 1, "t": 1, "mm": 1, "t_1": 1, "mm_1": 1}
    bw_layers |= {"mul_1": 0, "mul_2": 0, "cat": 0, "t_2": 0, "mm_2": 0}
    for n in bw_gm.graph.nodes:
        n.meta[LAYER] = bw_layers.get(n.name)
    return fw_gm, bw_gm


def _outputs(gm):
    return [getattr(a, "name", a) for a in gm.graph.find_nodes(op="output")[0].args[0]]


def _placeholders(gm):
    return [p.name for p in gm.graph.find_nodes(op="placeholder")]


def _run(fw_gm, bw_gm, num_fwd_outputs=1):
    torch.manual_seed(0)
    outs = fw_gm(torch.randn(N, D), torch.randn(D, 2 * D), torch.randn(D, D))
    saved = outs[num_fwd_outputs:]
    return outs[0], bw_gm(*saved, torch.tensor(1.0)), saved


def test_two_views_travel_as_one_copy_of_their_base():
    fw_gm, bw_gm = _graphs()
    ref = _run(copy.deepcopy(fw_gm), copy.deepcopy(bw_gm))
    r = insert_offload_pass(
        fw_gm, bw_gm, sync={0: (True, 1, False, 1)}, num_fwd_outputs=1, num_layers=2, min_bytes=0
    )
    check_offload(r)
    ((t,),) = [r.offloaded]
    assert (t.source, t.saved, t.via_base, t.nbytes) == (
        "mm",
        ("getitem", "getitem_1"),
        True,
        N * 2 * D * 4,
    )
    assert r.kept == (
        (2, "mul", "layer 1 is not in the sync dict"),
        (3, "x_1", "a graph input"),
        (4, "w1_1", "a graph input"),
    )
    # the two saved views became one host slot on both sides
    assert _outputs(fw_gm) == ["sum_1", "mm_host", "mul", "x_1", "w1_1"]
    assert _placeholders(bw_gm) == ["mm_host", "mul", "x_1", "w1_1", "tangents_1"]
    # ... and are rebuilt as the two halves of the reloaded base
    rebuilt = [n.args[1:] for n in bw_gm.graph.nodes if n.target is aten.as_strided.default]
    # (the first: the flat host copy viewed in the traced layout, insert_offload._unflat)
    assert rebuilt == [
        ([N, 2 * D], [2 * D, 1], 0),
        ([N, D], [2 * D, 1], 0),
        ([N, D], [2 * D, 1], D),
    ]
    assert op_sequence(fw_gm) == [("offload", 0), ("wait_offload", 0)]
    assert op_sequence(bw_gm) == [("reload", 0), ("wait_reload", 0)]
    loss, grads, saved = _run(fw_gm, bw_gm)
    assert torch.equal(loss, ref[0])
    assert all(torch.equal(a, b) for a, b in zip(grads, ref[1]))
    assert ops.POOL.owns(saved[0]) and saved[0].shape == (N * 2 * D,)  # returned flat


def test_offload_finishing_in_backward_adds_a_host_slot():
    fw_gm, bw_gm = _graphs()
    ref = _run(copy.deepcopy(fw_gm), copy.deepcopy(bw_gm))
    r = insert_offload_pass(
        fw_gm, bw_gm, sync={0: (False, 0, False, 1)}, num_fwd_outputs=1, num_layers=2, min_bytes=0
    )
    check_offload(r)
    # the device views stay saved (freed when the backward starts) next to the host copy
    assert _outputs(fw_gm) == ["sum_1", "getitem", "getitem_1", "mul", "x_1", "w1_1", "mm_host"]
    assert _placeholders(bw_gm) == [
        "getitem",
        "getitem_1",
        "mul",
        "x_1",
        "w1_1",
        "mm_host",
        "tangents_1",
    ]
    assert op_sequence(fw_gm) == [("offload", 0)]
    assert op_sequence(bw_gm) == [("wait_offload", 0), ("reload", 0), ("wait_reload", 0)]
    (wait,) = [n for n in bw_gm.graph.nodes if n.target is ops.wait_offload]
    assert [a.name for a in wait.args[1]] == ["getitem", "getitem_1"]
    loss, grads, _ = _run(fw_gm, bw_gm)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref[1]))


def test_storage_also_returned_stays_on_device():
    fw_gm, bw_gm = _graphs(_fw_returning_y)
    r = insert_offload_pass(
        fw_gm, bw_gm, sync={0: (True, 1, False, 1)}, num_fwd_outputs=2, num_layers=2, min_bytes=0
    )
    assert r.offloaded == ()
    assert r.kept[:2] == (
        (0, "getitem", "the forward also returns it (mm)"),
        (1, "getitem_1", "the forward also returns it (mm)"),
    )
    assert op_sequence(fw_gm) == op_sequence(bw_gm) == []


def test_min_bytes_counts_the_whole_copy():
    fw_gm, bw_gm = _graphs()
    r = insert_offload_pass(
        fw_gm,
        bw_gm,
        sync={0: (True, 1, False, 1)},
        num_fwd_outputs=1,
        num_layers=2,
        min_bytes=N * 2 * D * 4 + 1,
    )
    assert r.offloaded == ()
    assert r.kept[0] == (0, "getitem", f"{N * 2 * D * 4} bytes < min_bytes={N * 2 * D * 4 + 1}")
