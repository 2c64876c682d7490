"""check_offload: the invariants an offload rewrite must satisfy (tests and debug runs).

* every ``wait_offload`` sits right before the first kernel of the layer where its offload
  must finish (``offload_done``), every ``reload`` right before the first kernel of the layer
  where it must start, and that kernel waits for it (it reads memopt's barrier);
* every ``wait_reload`` sits after the last matmul before the first use of the reloaded
  value (at the first use when that is a matmul);
* a host copy is only ever read by memopt's ops (never by compute).

"Right before" ignores other memopt ops and rebuilt views. A placement the rewrite had to
move (``node.meta[MOVED]``, explained in ``result.notes``) is exempt from the position checks.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from memopt.meta_keys import LAYER
from memopt.offload import ops
from memopt.offload.fx_helpers import MOVED, GraphIndex, is_memopt_op, is_offload_node
from memopt.offload.result import OffloadResult

aten = torch.ops.aten


def op_sequence(gm: fx.GraphModule) -> list[tuple[str, int | None]]:
    """``(op, layer)`` of the memopt copy ops in graph order (barriers left out)."""
    return [
        (n.target._opname, n.meta.get(LAYER))
        for n in gm.graph.nodes
        if is_memopt_op(n) and n.target is not ops.barrier
    ]


def _next_compute(node: fx.Node) -> fx.Node:
    cur = node.next
    while is_offload_node(cur):
        cur = cur.next
    return cur


def _gated(kernel: fx.Node) -> bool:
    return any(a.target is ops.barrier for a in kernel.all_input_nodes)


def check_offload(result: OffloadResult) -> None:
    """Raise AssertionError naming the first violated invariant."""
    sched = result.schedule
    n = sched.num_layers
    fw_idx = GraphIndex.build(result.fw.graph, n, forward=True)
    bw_idx = GraphIndex.build(result.bw.graph, n, forward=False)
    for graph, idx, forward in (
        (result.fw.graph, fw_idx, True),
        (result.bw.graph, bw_idx, False),
    ):
        for node in graph.nodes:
            if not is_memopt_op(node) or node.target is ops.barrier:
                continue
            layer = node.meta.get(LAYER)
            entry = sched.get(layer)
            assert entry is not None, f"{node.name}: layer {layer} is not offloaded"
            if node.target is ops.wait_offload:
                _expect(result, node, idx, entry.offload_done, forward, n)
            elif node.target is ops.reload:
                _expect(result, node, idx, entry.reload_start, forward, n)
            elif node.target is ops.wait_reload:
                _expect_before_use(node, idx)
    for ph in result.bw.graph.find_nodes(op="placeholder"):
        if any(u.target in (ops.reload, ops.wait_offload) and u.args[0] is ph for u in ph.users):
            bad = [u.name for u in ph.users if not is_memopt_op(u)]
            assert not bad, f"host copy {ph.name} is read by compute: {bad}"


def _expect_before_use(node: fx.Node, idx: GraphIndex) -> None:
    users = [u for u in node.users if not is_memopt_op(u)]
    firsts = [u for u in users if u.target is not aten.as_strided.default]
    for v in users:
        if v.target is aten.as_strided.default:
            firsts.extend(v.users)
    if not firsts:
        return
    first = min(firsts, key=idx.pos.__getitem__)
    if first is idx.output:
        return
    between = [k for k in idx.kernels if idx.pos[node] < idx.pos[k] < idx.pos[first]]
    assert idx.pos[node] < idx.pos[first] and between in ([], [_next_compute(node)]), (
        f"{node.name}: waits {len(between)} matmuls ahead of its first use {first.name}"
    )


def _expect(result: OffloadResult, node: fx.Node, idx: GraphIndex, point, forward: bool, n: int):
    if point.forward != forward:
        raise AssertionError(
            f"{node.name}: placed in the {'forward' if forward else 'backward'} graph, but "
            f"its sync point is {point.describe(n)}"
        )
    if node.meta.get(MOVED):
        return
    start = idx.point_node(point.layer(n), forward)
    expected = next(
        (k for k in idx.kernels if idx.pos[k] >= idx.pos[start] and _gated(k)), idx.output
    )
    got = _next_compute(node)
    assert got is expected, (
        f"{node.name} (layer {node.meta.get(LAYER)}): expected right before {expected.name} "
        f"({point.describe(n)}), found before {got.name}"
    )
