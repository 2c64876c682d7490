"""What the offload rewrite needs beyond :mod:`memopt.facts` (storage roots, layers and
matmuls are read from there): layouts, layer regions as nodes, anchors and gates."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.fx as fx

from memopt import _torch_compat as compat
from memopt.facts import (
    alias_users,
    aliased_input,
    first_user,
    is_matmul,
    is_view,
    layer_starts,
    storage_root,
    tensor_val,
)

aten = torch.ops.aten


MOVED = "memopt_offload_moved"
"""node.meta flag: the rewrite placed this op away from its sync point (see the notes)."""


def nbytes_hint(v: torch.Tensor) -> int:
    """Bytes of a (fake) tensor's elements; symbolic sizes use the compile's hints."""
    return compat.int_hint(v.numel()) * v.element_size()


def is_static(v: torch.Tensor) -> bool:
    vals = (*v.shape, *v.stride(), v.storage_offset())
    return all(isinstance(x, int) for x in vals)


def same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same size, stride and storage offset (symbolic sizes compared as expressions)."""
    ea = [compat.sym_expr(x) for x in (*a.shape, *a.stride(), a.storage_offset())]
    eb = [compat.sym_expr(x) for x in (*b.shape, *b.stride(), b.storage_offset())]
    return a.dim() == b.dim() and ea == eb


def storage_closure(root: fx.Node) -> set[fx.Node]:
    """``root`` and every node that is a view of it."""
    return {root} | {
        u for u in alias_users(root) if aliased_input(u) is not None and storage_root(u) is root
    }


def is_memopt_op(node: fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "namespace", None) == "memopt"


def is_offload_node(node: fx.Node) -> bool:
    """A node the offload rewrite inserted: a memopt op or a view rebuilt from a reload."""
    if is_memopt_op(node):
        return True
    return (
        node.op == "call_function"
        and node.target is aten.as_strided.default
        and isinstance(node.args[0], fx.Node)
        and is_memopt_op(node.args[0])
    )


@dataclass
class GraphIndex:
    """Positions, layer regions and extern kernels of one graph, computed before it is
    rewritten.

    The rewrite orders its ops through *gates*: the first matmul at or after a sync point. A gate's activation input ``x`` is routed through memopt's
    barriers (``x -> marker -> ... -> barrier(deps) -> kernel``), so copy ops can follow the
    marker and the kernel waits for them, while no original node gains or loses a user --
    Inductor's pattern matching and fusion (hence the numerics) are unchanged.
    """

    graph: fx.Graph
    nodes: list[fx.Node]
    pos: dict[fx.Node, int]
    output: fx.Node
    starts: dict[int, fx.Node]
    """First node of each layer's region (in this graph's execution order)."""
    kernels: list[fx.Node]
    """The matmuls, in graph order."""

    @classmethod
    def build(cls, graph: fx.Graph, num_layers: int, forward: bool) -> GraphIndex:
        nodes = list(graph.nodes)
        pos = {n: i for i, n in enumerate(nodes)}
        output = graph.find_nodes(op="output")[0]
        starts = {
            layer: nodes[i]
            for layer, i in layer_starts(nodes, forward=forward).items()
            if 0 <= layer < num_layers
        }
        kernels = [n for n in nodes if is_matmul(n)]
        return cls(graph, nodes, pos, output, starts, kernels)

    def point_node(self, layer: int | None, forward: bool) -> fx.Node:
        """Where a sync point is: the start of ``layer`` (or of the next layer that has nodes
        here), or the output node at the end of the pass."""
        if layer is None:
            return self.output
        if forward:
            later = [k for k in self.starts if k >= layer]
            return self.starts[min(later)] if later else self.output
        later = [k for k in self.starts if k <= layer]
        return self.starts[max(later)] if later else self.output

    def first_user(self, nodes: Iterable[fx.Node]) -> fx.Node | None:
        return first_user(nodes, self.pos)


def gateless_layers(fw: fx.Graph, bw: fx.Graph, num_layers: int) -> dict[int, list[str]]:
    """Layers with no gate kernel (matmul) in their forward or backward region (conv-only
    blocks): layer -> ``["forward"]``, ``["backward"]`` or both. Offload cannot order their
    copies inside the layer, so it leaves them on the device and the planner does not offer
    them."""
    out: dict[int, list[str]] = {}
    for graph, forward in ((fw, True), (bw, False)):
        idx = GraphIndex.build(graph, num_layers, forward=forward)
        order = sorted(idx.starts.items(), key=lambda kv: idx.pos[kv[1]])
        kernels = sorted(idx.pos[k] for k in idx.kernels)
        for k, (layer, node) in enumerate(order):
            lo = idx.pos[node]
            hi = idx.pos[order[k + 1][1]] if k + 1 < len(order) else len(idx.nodes)
            if not any(lo <= p < hi for p in kernels):
                out.setdefault(layer, []).append("forward" if forward else "backward")
    return out


def gate_input(kernel: fx.Node, banned: Callable[[fx.Node], bool]) -> fx.Node | None:
    """The input of a gate kernel to route through barriers: an activation (something
    computed, so ops following it wait for the previous layer), else any tensor input;
    never one for which ``banned`` is true."""
    inputs = [a for a in kernel.all_input_nodes if tensor_val(a) is not None and not banned(a)]
    computed = [a for a in inputs if a.op != "placeholder" and not _is_view_of_input(a)]
    return (computed or inputs or [None])[0]


def _is_view_of_input(n: fx.Node) -> bool:
    inputs = n.all_input_nodes
    return bool(inputs) and all(a.op == "placeholder" for a in inputs) and is_view(n)


def fake_mode_of(*graphs: fx.Graph):
    vals = [n.meta.get("val") for g in graphs for n in g.nodes if tensor_val(n) is not None]
    mode = compat.detect_fake_mode(vals)
    if mode is None:
        raise ValueError("the graphs carry no fake tensors in node.meta['val']")
    return mode
