"""Graph facts the offload rewrite reads: storage roots, layer regions, anchors and gates."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.fx as fx

from memopt import _torch_compat as compat
from memopt.meta_keys import LAYER

aten = torch.ops.aten


def _matmul_targets() -> frozenset:
    out = set()
    for name in ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm"):
        packet = getattr(aten, name, None)
        if packet is not None:
            out.update(getattr(packet, o) for o in packet.overloads())
    return frozenset(out)


MATMULS = _matmul_targets()
"""Gate kernels. Matmuls take inputs of any layout, so routing one of their inputs through a
barrier changes no lowering; attention and convolution impose layouts and are left alone."""

MOVED = "memopt_offload_moved"
"""node.meta flag: the rewrite placed this op away from its sync point (see the notes)."""


def tensor_val(node: object) -> torch.Tensor | None:
    if not isinstance(node, fx.Node):
        return None
    v = node.meta.get("val")
    return v if isinstance(v, torch.Tensor) else None


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


def _shares(val: object, storage_of: torch.Tensor) -> bool:
    if isinstance(val, torch.Tensor):
        return compat.same_storage(val, storage_of)
    if isinstance(val, list | tuple):
        return any(_shares(v, storage_of) for v in val)
    return False


def storage_root(node: fx.Node) -> fx.Node:
    """The node that allocated ``node``'s storage: walk back through views (any op whose output
    shares storage with an input, e.g. reshape, permute, split + getitem)."""
    v = tensor_val(node)
    assert v is not None, node
    cur, last_tensor = node, node
    while True:
        nxt = next((a for a in cur.all_input_nodes if _shares(a.meta.get("val"), v)), None)
        if nxt is None:
            # a multi-output op (var_mean, sdpa) allocates each output: its getitem is the root
            return last_tensor
        cur = nxt
        if tensor_val(cur) is not None:
            last_tensor = cur


def storage_closure(root: fx.Node) -> set[fx.Node]:
    """``root`` and every node that is a view of it."""
    v = tensor_val(root)
    assert v is not None, root
    seen, todo = {root}, [root]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u not in seen and _shares(u.meta.get("val"), v):
                seen.add(u)
                todo.append(u)
    return seen


def saved_layer(bw_node: fx.Node, fw_node: fx.Node, bw_pos: dict[fx.Node, int]) -> int | None:
    """The layer a saved tensor is offloaded with: the layer of its first backward user that
    has one (the backward that needs it first), else the layer of its forward producer. The
    budget planner places its offload windows by the same rule."""
    for user in sorted(bw_node.users, key=bw_pos.__getitem__):
        if user.meta.get(LAYER) is not None:
            return user.meta[LAYER]
    return fw_node.meta.get(LAYER)


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
        starts: dict[int, fx.Node] = {}
        order = range(num_layers) if forward else range(num_layers - 1, -1, -1)
        floor = -1
        for layer in order:
            first = next(
                (n for n in nodes if pos[n] > floor and n.meta.get(LAYER) == layer and _is_work(n)),
                None,
            )
            if first is not None:
                starts[layer] = first
                floor = pos[first]
        kernels = [n for n in nodes if _is_kernel(n)]
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
        users = [u for n in nodes for u in n.users if u in self.pos]
        return min(users, key=self.pos.__getitem__, default=None)


def gate_input(kernel: fx.Node, banned: Callable[[fx.Node], bool]) -> fx.Node | None:
    """The input of a gate kernel to route through barriers: an activation (something
    computed, so ops following it wait for the previous layer), else any tensor input;
    never one for which ``banned`` is true."""
    inputs = [a for a in kernel.all_input_nodes if tensor_val(a) is not None and not banned(a)]
    computed = [a for a in inputs if a.op != "placeholder" and not _is_view_of_input(a)]
    return (computed or inputs or [None])[0]


def _is_kernel(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target in MATMULS


def _is_view_of_input(n: fx.Node) -> bool:
    inputs = n.all_input_nodes
    return bool(inputs) and all(a.op == "placeholder" for a in inputs) and _is_view_node(n)


def _flat(args: object) -> list[fx.Node]:
    out: list[fx.Node] = []
    fx.node.map_arg(args, lambda n: out.append(n))
    return out


def _is_work(n: fx.Node) -> bool:
    """A node that marks where a layer's computation begins: not a placeholder and not a view
    of one (weight transposes can sit anywhere)."""
    if n.op != "call_function" or tensor_val(n) is None or is_offload_node(n):
        return False
    return not _is_view_of_input(n)


def _is_view_node(n: fx.Node) -> bool:
    v = tensor_val(n)
    return v is not None and any(_shares(a.meta.get("val"), v) for a in n.all_input_nodes)


def fake_mode_of(*graphs: fx.Graph):
    vals = [n.meta.get("val") for g in graphs for n in g.nodes if tensor_val(n) is not None]
    mode = compat.detect_fake_mode(vals)
    if mode is None:
        raise ValueError("the graphs carry no fake tensors in node.meta['val']")
    return mode
