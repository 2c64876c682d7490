"""build_planning_problem: turn the baseline forward/backward graphs and the analysis's
candidates into the budget planner's plain data (:mod:`memopt.planner.problem`).

Reads ``node.meta["val"]`` (sizes at the compile-time hints), ``node.meta[LAYER]`` (from
detect_layers_pass, when present) and the :class:`memopt.candidates.Candidate` list. Writes
nothing. Positions are op indices in the baseline forward graph, then the backward graph.
Per-op time is a roofline (FLOPs of matmuls and attention over the matmul rate, bytes read and
written over the memory rate: pointwise ops are memory-bound, not free). Live bytes come from a
liveness sweep of each graph with every candidate left out (the planner adds them back per its
decisions); graph inputs count as static bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import sympy
import torch
import torch.fx

from memopt import memory_rules as rules
from memopt import meta_keys as mk
from memopt.candidates import Candidate as Analysis
from memopt.decide import saved_id
from memopt.offload.fx_helpers import saved_layer
from memopt.passes.find_saved_activations import is_view_op
from memopt.plan import PlanSpec, Strategy
from memopt.planner.problem import Candidate, OpCost, PlanningProblem, StepTimeline

aten = torch.ops.aten
_MM = {"mm": 2, "addmm": 2, "bmm": 2, "baddbmm": 2}


def _nbytes(val, value: Callable[[sympy.Expr], int | None]) -> int:
    if isinstance(val, torch.Tensor):
        n = val.numel()
        n = value(n.node.expr) if isinstance(n, torch.SymInt) else n
        return int(n or 0) * val.element_size()
    if isinstance(val, tuple | list):
        return sum(_nbytes(v, value) for v in val)
    return 0


def _size(x, value) -> int:
    if isinstance(x, torch.SymInt):
        return int(value(x.node.expr) or 0)
    return int(x)


def op_cost(node: torch.fx.Node, value) -> OpCost:
    """FLOPs and bytes moved by one node (views move nothing; values that Inductor fuses away
    are neither written nor read back)."""
    if node.op != "call_function" or is_view_op(node):
        return OpCost()
    out = node.meta.get(mk.TORCH_VAL)
    # fusion: only values that exist in memory move bytes; a fused-away value is computed in
    # registers by the kernel of its consumer, which reads the inputs that do exist
    moved = _nbytes(out, value) if rules.materialized(node) else 0
    for a in node.all_input_nodes:
        if rules.materialized(rules.root(a)):
            moved += _nbytes(a.meta.get(mk.TORCH_VAL), value)
    name = getattr(node.target, "__name__", "").split(".")[0]
    flops = 0.0
    if name in _MM and isinstance(out, torch.Tensor):
        a = node.args[1] if name in ("addmm", "baddbmm") else node.args[0]
        k = _size(a.meta[mk.TORCH_VAL].shape[-1], value)
        flops = 2.0 * k * math.prod(_size(s, value) for s in out.shape)
    elif "attention" in name:
        q = node.args[0].meta.get(mk.TORCH_VAL)
        if isinstance(q, torch.Tensor) and q.dim() == 4:
            b, h, s, d = (_size(x, value) for x in q.shape)
            flops = 4.0 * b * h * s * s * d * (2.5 if "backward" in name else 1.0)
    return OpCost(flops=flops, bytes=moved)


def _liveness(
    gm: torch.fx.GraphModule,
    skip: set[str],
    value,
    *,
    inputs_live: Collection[str] = (),
    pad_matmuls: bool = False,
) -> tuple[list[torch.fx.Node], list[int]]:
    """Bytes live while each call_function node runs, by :mod:`memopt.memory_rules` (the
    rules of ``memopt plan``'s liveness model): aliases own nothing, temporaries that Inductor
    fuses away take no memory, a value lives until the last kernel that reads it, graph
    outputs live to the end, padded matmul operands are copies. ``skip``: storages the planner
    places itself (its candidates). Placeholders are static except ``inputs_live`` (the
    backward's tangents), live from the start to their last read."""
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    pos = {n: i for i, n in enumerate(ops)}
    reads = rules.ReadPoints(pos)
    out_node = gm.graph.output_node()
    last_pos = len(ops) - 1
    delta = [0] * (len(ops) + 1)

    def add(start: int, end: int, size: int) -> None:  # inclusive positions
        if last_pos < 0:
            return
        delta[min(start, last_pos)] += size
        delta[min(max(start, end), last_pos) + 1] -= size

    for n in ops:
        if rules.aliased_input(n) is not None or n.name in skip:
            continue
        size = _nbytes(n.meta.get(mk.TORCH_VAL), value)
        users = rules.alias_users(n)
        if any(u is out_node for u in users):
            add(pos[n], last_pos, size)
        elif rules.must_exist(n, users):
            add(rules.start(n, pos), reads.last(users, pos[n]), size)
    for p in gm.graph.nodes:
        if p.op == "placeholder" and p.name in inputs_live:
            add(0, reads.last(rules.alias_users(p), 0), _nbytes(p.meta.get(mk.TORCH_VAL), value))
    if pad_matmuls:
        for operand, factor, first, last in rules.padded_copies(ops, pos):
            add(first, last, int(_nbytes(operand.meta.get(mk.TORCH_VAL), value) * factor))
    live, acc = [], 0
    for i in range(len(ops)):
        acc += delta[i]
        live.append(acc)
    return ops, live


def layer_starts(ops: Sequence[torch.fx.Node], *, forward: bool) -> dict[int, int]:
    """Op index where each layer's region begins, in execution order (forward: 0, 1, ...;
    backward: n-1, ..., 0): the first op of the layer after the previous layer's start, as
    the offload rewrite places its sync points (:class:`memopt.offload.fx_helpers.GraphIndex`).
    A few ops of a layer can sit elsewhere (in the backward, ops tagged with the bottom layer
    run early); taking each layer's very first op would make the starts non-monotonic and the
    layers unusable for offload."""
    tags = {n.meta.get(mk.LAYER) for n in ops}
    order = sorted((t for t in tags if isinstance(t, int)), reverse=not forward)
    starts: dict[int, int] = {}
    floor = -1
    for lay in order:
        first = next(
            (i for i, n in enumerate(ops) if i > floor and n.meta.get(mk.LAYER) == lay), None
        )
        if first is not None:
            starts[lay] = first
            floor = first
    return starts


def build_planning_problem(
    joint: torch.fx.GraphModule,
    fw: torch.fx.GraphModule,
    bw: torch.fx.GraphModule,
    analysis: Sequence[Analysis],
    *,
    value: Callable[[sympy.Expr], int | None],
    fixed: Sequence[PlanSpec] = (),
    rates_op_s: Callable[[OpCost], float],
    min_offload_bytes: int = 1 << 20,
    pad_matmuls: bool = False,
) -> PlanningProblem:
    """``pad_matmuls``: charge the padded operand copies Inductor makes on CUDA."""
    usable = [a for a in analysis if a.cluster_id is not None or a.layer is not None]
    skip = {m for a in usable for m in (a.root, *a.members)}
    fw_names = {a.name for a in fw.graph.output_node().args[0] if isinstance(a, torch.fx.Node)}
    tangents = {
        p.name
        for p in bw.graph.nodes
        if p.op == "placeholder"
        and p.name not in fw_names
        and isinstance(p.meta.get(mk.TORCH_VAL), torch.Tensor)
    }
    fw_ops, fw_live = _liveness(fw, skip, value, pad_matmuls=pad_matmuls)
    bw_ops, bw_live = _liveness(bw, skip, value, inputs_live=tangents, pad_matmuls=pad_matmuls)
    fw_pos = {n.name: i for i, n in enumerate(fw_ops)}
    fw_by_name = {n.name: n for n in fw.graph.nodes}
    bw_by_name = {n.name: n for n in bw.graph.nodes}
    bw_node_pos = {n: i for i, n in enumerate(bw.graph.nodes)}
    bw_reads = rules.ReadPoints({n: i for i, n in enumerate(bw_ops)})
    joint_by_name = {n.name: n for n in joint.graph.nodes}
    static = sum(
        _nbytes(n.meta.get(mk.TORCH_VAL), value) for n in fw.graph.nodes if n.op == "placeholder"
    )
    layer_fwd = layer_starts(fw_ops, forward=True)
    layer_bwd = layer_starts(bw_ops, forward=False)
    layers = sorted(set(layer_fwd) & set(layer_bwd))
    f_starts = [layer_fwd[x] for x in layers]
    b_starts = [layer_bwd[x] for x in layers]
    ok = all(a < b for a, b in zip(f_starts, f_starts[1:])) and all(
        a > b for a, b in zip(b_starts, b_starts[1:])
    )
    if not ok:
        layers, f_starts, b_starts = [], [], []
    index_of_layer = {lay: k for k, lay in enumerate(layers)}

    cands = []
    for a in usable:
        members = [m for m in (a.root, *a.members) if m in fw_pos or m in bw_by_name]
        fpos = [fw_pos[m] for m in members if m in fw_pos]
        uses = [
            p
            for m in members
            if m in bw_by_name
            for u in rules.alias_users(bw_by_name[m])
            if (p := bw_reads.at(u)) is not None
        ]
        if not fpos or not uses:
            continue
        rec = a.recompute_nodes.get(Strategy.RECOMPUTE, ())
        comp = a.recompute_nodes.get(Strategy.COMPROMISE)
        nbytes = int(value(a.nbytes) or 0)
        kept = None
        if Strategy.COMPROMISE in a.savings:
            kept = nbytes - int(value(a.savings[Strategy.COMPROMISE]) or 0)
        # the offload rewrite's layer of a storage: the latest of its saved members' layers
        tags = [
            saved_layer(bw_by_name[m], fw_by_name[m], bw_node_pos)
            for m in members
            if m in fw_by_name
            and bw_by_name.get(m) is not None
            and bw_by_name[m].op == "placeholder"
        ]
        tags = [t for t in tags if t is not None]
        tag = max(tags) if tags else a.layer
        layer = index_of_layer.get(tag) if tag is not None else None
        cands.append(
            Candidate(
                name=a.root,
                cluster_id=a.cluster_id or saved_id(a.root),
                occurrence=max(a.occurrence, 0),
                layer=layer,
                nbytes=nbytes,
                produce_pos=min(fpos),
                last_fwd_use_pos=max(fpos),
                first_bwd_use_pos=min(uses),
                last_bwd_use_pos=max(uses),
                recomputable=Strategy.RECOMPUTE in a.savings or Strategy.COMPROMISE in a.savings,
                recompute_ops=tuple(op_cost(joint_by_name[x], value) for x in (rec or comp or ())),
                compromise_kept_bytes=kept,
                compromise_ops=(
                    tuple(op_cost(joint_by_name[x], value) for x in comp) if comp else None
                ),
                offloadable=layer is not None and nbytes >= min_offload_bytes,
                nbytes_expr=a.nbytes,
            )
        )
    timeline = StepTimeline(
        fwd_op_s=tuple(rates_op_s(op_cost(n, value)) for n in fw_ops),
        bwd_op_s=tuple(rates_op_s(op_cost(n, value)) for n in bw_ops),
        fwd_live_bytes=tuple(fw_live),
        bwd_live_bytes=tuple(bw_live),
        static_bytes=static,
        layer_fwd_start=tuple(f_starts),
        layer_bwd_start=tuple(b_starts),
    )
    return PlanningProblem(
        candidates=tuple(cands),
        timeline=timeline,
        fixed={p.cluster_id: (int(p.strategy), p.count) for p in fixed},
    )
