"""build_planning_problem: turn the baseline forward/backward graphs and the analysis's
candidates into the budget planner's plain data (:mod:`memopt.planner.problem`).

Reads ``node.meta["val"]`` (sizes at the compile-time hints), ``node.meta[LAYER]`` (from
detect_layers_pass, when present) and the :class:`memopt.candidates.SavedActivation` list. Writes
nothing. Positions are op indices in the baseline forward graph, then the backward graph.
Per-op time is the kernel's time measured on the device where there is one (matmuls,
attention, convolutions, reductions: ``Sizes.kernel_s``), else a roofline (FLOPs of matmuls and attention
over the matmul rate, bytes read and written over the memory rate: pointwise ops are
memory-bound, not free). Live bytes come from a
liveness sweep of each graph with every candidate left out (the planner adds them back per its
decisions); graph inputs count as static bytes. A size that cannot be evaluated (a
data-dependent shape) is unknown, not 0: its candidate is left out of the plan (kept) and
the node is named in ``Sizes.unknown`` for the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import facts
from memopt import memory_rules as rules
from memopt import meta_keys as mk
from memopt._torch_compat.sizes import known_equal
from memopt.candidates import SavedActivation as Analysis
from memopt.decide import saved_id
from memopt.offload.fx_helpers import gateless_layers
from memopt.passes.rerun_siblings import rerun_siblings
from memopt.plan import PlanSpec, Strategy
from memopt.planner.problem import Candidate, OpCost, PlanningProblem, StepTimeline


@dataclass
class Sizes:
    """Sizes at the compile's values; what cannot be evaluated is recorded, never taken as 0."""

    value: Callable[[sympy.Expr], int | None]
    unknown: set[str] = field(default_factory=set)
    kernel_s: Callable[[torch.fx.Node], float | None] = lambda _node: None
    """A node's kernel time measured on the device (memopt.kernel_times.lookup), None where
    none was: the roofline prices it."""

    def of(self, node: torch.fx.Node) -> int:
        """Bytes of a node's value; an unknown size counts 0 here and is named in ``unknown``."""
        n = facts.nbytes(node.meta.get(mk.TORCH_VAL), self.value)
        if n is None:
            self.unknown.add(node.name)
            return 0
        return n

    def expr(self, e: sympy.Expr) -> int | None:
        v = self.value(e)
        return None if v is None else int(v)

    def dim(self, x: object) -> int:
        return facts.dim_value(x, self.value) or 0


def op_cost(node: torch.fx.Node, sizes: Sizes) -> OpCost:
    """FLOPs and bytes moved by one node (views move nothing; values that Inductor fuses away
    are neither written nor read back)."""
    if node.op != "call_function" or facts.is_view(node):
        return OpCost()
    out = node.meta.get(mk.TORCH_VAL)
    # fusion: only values that exist in memory move bytes; a fused-away value is computed in
    # registers by the kernel of its consumer, which reads the inputs that do exist
    moved = sizes.of(node) if rules.materialized(node) else 0
    for a in node.all_input_nodes:
        if rules.materialized(facts.storage_root(a)):
            moved += sizes.of(a)
    name = facts.packet(node.target)
    flops = 0.0
    if name in facts.MATMUL_OPERANDS and isinstance(out, torch.Tensor):
        a = node.args[facts.MATMUL_OPERANDS[name][0]]
        k = sizes.dim(a.meta[mk.TORCH_VAL].shape[-1])
        flops = 2.0 * k * math.prod(sizes.dim(s) for s in out.shape)
    elif name in ("convolution", "convolution_backward"):
        flops = _conv_flops(node, name, sizes)
    elif "attention" in name:
        q = facts.tensor_val(node.args[0])
        if q is not None and q.dim() == 4:
            b, h, s, d = (sizes.dim(x) for x in q.shape)
            flops = 4.0 * b * h * s * s * d * (2.5 if "backward" in name else 1.0)
    return OpCost(flops=flops, bytes=moved, seconds=sizes.kernel_s(node))


def _conv_flops(node: torch.fx.Node, name: str, sizes: Sizes) -> float:
    """2 FLOPs per multiply-add: each output element (each input element of a transposed
    convolution) takes ``prod(weight.shape[1:])`` of them; the backward computes the input
    gradient and the weight gradient as its output mask asks, each as many as the forward."""
    a = node.args
    if name == "convolution_backward":  # (grad_output, input, weight, ..., transposed@7, mask@10)
        w, x = facts.tensor_val(a[2]), facts.tensor_val(a[1] if a[7] else a[0])
        mask = a[10] if len(a) > 10 else (True, True, True)
        passes = bool(mask[0]) + bool(mask[1])
    else:  # (input, weight, bias, stride, padding, dilation, transposed@6, ...)
        w, x = facts.tensor_val(a[1]), facts.tensor_val(a[0] if a[6] else node)
        passes = 1
    if w is None or x is None:
        return 0.0
    per = math.prod(sizes.dim(d) for d in w.shape[1:])
    return 2.0 * per * math.prod(sizes.dim(d) for d in x.shape) * passes


@dataclass(frozen=True)
class Live:
    """One value a graph holds that is not a candidate: live at op positions ``start..end``
    (inclusive) of its graph."""

    name: str
    start: int
    end: int
    nbytes: int
    kind: str
    """``output`` (a graph output: a gradient, the loss, logits), ``temporary``, ``tangent``,
    ``graph input copy`` (a tangent's copy in a CUDA graph's pool), ``padded copy`` (of
    ``name``) or ``layout copy`` (of ``name``)."""


def _liveness(
    gm: torch.fx.GraphModule,
    skip: set[str],
    sizes: Sizes,
    *,
    inputs_live: Collection[str] = (),
    pad_matmuls: bool = False,
    inputs_copied: bool = False,
) -> tuple[list[torch.fx.Node], list[Live]]:
    """The values live while each call_function node runs, by :mod:`memopt.memory_rules` (the
    rules of ``memopt plan``'s liveness model): aliases own nothing, temporaries that Inductor
    fuses away take no memory, a value lives until the last kernel that reads it, graph
    outputs live to the end, padded matmul operands are copies. ``skip``: storages the planner
    places itself (its candidates). Placeholders are static except ``inputs_live`` (the
    backward's tangents), live from the start to their last read, or on a torch whose
    autograd holds them until the backward returns, for the whole graph (torch 2.11: HF's
    logits get a zero gradient the loss never reads, live to the end; benchmarks/
    diag_tangents.py). ``inputs_copied`` (CUDA graphs): each of ``inputs_live`` is also copied
    into the graph's pool for the whole graph, as cudagraph trees copy a captured graph's
    inputs made outside it (on the H100 the zoo Llama's recording step held its 500 MiB logits
    tangent twice: docs/benchmarks.md, fifty-sixth session)."""
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    pos = {n: i for i, n in enumerate(ops)}
    reads = rules.ReadPoints(pos)
    out_node = gm.graph.output_node()
    last_pos = len(ops) - 1
    items: list[Live] = []

    def add(node: torch.fx.Node, start: int, end: int, kind: str, size: int | None = None):
        if last_pos >= 0:
            size = sizes.of(node) if size is None else size
            items.append(
                Live(node.name, min(start, last_pos), min(max(start, end), last_pos), size, kind)
            )

    for n in ops:
        if facts.aliased_input(n) is not None or n.name in skip:
            continue
        users = facts.alias_users(n)
        if any(u is out_node for u in users):
            add(n, pos[n], last_pos, "output")
        elif rules.must_exist(n, users):
            add(n, rules.start(n, pos), reads.last(users, pos[n]), "temporary")
    held = compat.tangents_held_to_the_end()
    for p in gm.graph.nodes:
        if p.op == "placeholder" and p.name in inputs_live:
            add(p, 0, last_pos if held else reads.last(facts.alias_users(p), 0), "tangent")
            if inputs_copied:
                add(p, 0, last_pos, "graph input copy")
    if pad_matmuls:
        for operand, factor, first, last in rules.padded_copies(ops, pos):
            add(operand, first, last, "padded copy", int(sizes.of(operand) * factor))
    return ops, items


def _curve(items: Sequence[Live], n: int) -> list[int]:
    """Bytes live at each of ``n`` positions."""
    delta = [0] * (n + 1)
    for it in items:
        delta[it.start] += it.nbytes
        delta[it.end + 1] -= it.nbytes
    live, acc = [], 0
    for i in range(n):
        acc += delta[i]
        live.append(acc)
    return live


#: devices whose matmuls Inductor's joint-graph ``pad_mm`` pass pads (``can_pad``'s device check)
_PADDING_DEVICES = frozenset({"cuda", "xpu"})


def pads_in_graph(gm: torch.fx.GraphModule) -> bool:
    """Whether Inductor's ``pad_mm`` already ran on this graph: on CUDA it runs among the
    joint-graph passes, before the partitioner, so the padded operands it chose are
    ``constant_pad_nd`` nodes of the graph (the matmuls left unaligned are those its benchmark
    kept as they are). Only a graph traced on another device (``memopt plan`` emulating a GPU
    on CPU tensors) needs :func:`memopt.memory_rules.padded_copies` to predict them."""
    for n in gm.graph.nodes:
        v = facts.tensor_val(n)
        if v is not None and v.device.type in _PADDING_DEVICES:
            return True
    return False


def _layer_events(fw_ops, bw_ops) -> tuple[list[int], list[int], list[int]]:
    """The layers with a start in both graphs, and their forward and backward starts; none
    when the starts are not monotonic (layers unusable for offload)."""
    layer_fwd = facts.layer_starts(fw_ops, forward=True)
    layer_bwd = facts.layer_starts(bw_ops, forward=False)
    layers = sorted(set(layer_fwd) & set(layer_bwd))
    f_starts = [layer_fwd[x] for x in layers]
    b_starts = [layer_bwd[x] for x in layers]
    ok = all(a < b for a, b in zip(f_starts, f_starts[1:])) and all(
        a > b for a, b in zip(b_starts, b_starts[1:])
    )
    return (layers, f_starts, b_starts) if ok else ([], [], [])


def _tangents(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule) -> set[str]:
    fw_names = {a.name for a in fw.graph.output_node().args[0] if isinstance(a, torch.fx.Node)}
    return {
        p.name
        for p in bw.graph.nodes
        if p.op == "placeholder" and p.name not in fw_names and facts.tensor_val(p) is not None
    }


def recompute_reads(analysis: Sequence[Analysis]) -> dict[str, dict[Strategy, tuple[str, ...]]]:
    """Per candidate and recompute strategy, the other candidates whose tensors its recompute
    subgraph reads (what the chain-depth rule of :func:`memopt.decide.decide` looks at)."""
    producer = {m: a.root for a in analysis for m in (a.root, *a.members)}
    out: dict[str, dict[Strategy, tuple[str, ...]]] = {}
    for a in analysis:
        out[a.root] = {
            s: tuple(sorted({producer[i] for i in ins if producer.get(i, a.root) != a.root}))
            for s, ins in a.boundary.items()
        }
    return out


class _Graphs:
    """Name lookups and read points of the baseline graphs, built once."""

    def __init__(self, joint, fw, bw, fw_ops, bw_ops):
        self.fw_pos = {n.name: i for i, n in enumerate(fw_ops)}
        self.fw_by_name = {n.name: n for n in fw.graph.nodes}
        self.bw_by_name = {n.name: n for n in bw.graph.nodes}
        self.bw_node_pos = {n: i for i, n in enumerate(bw.graph.nodes)}
        self.bw_reads = rules.ReadPoints({n: i for i, n in enumerate(bw_ops)})
        self.fw_reads = rules.ReadPoints({n: i for i, n in enumerate(fw_ops)})
        self.joint_by_name = {n.name: n for n in joint.graph.nodes}
        self.bw_pos = {n: i for i, n in enumerate(bw_ops)}
        self.donated = donated_saved(fw, bw)
        self.in_place_claimed: set[torch.fx.Node] = set()  # one buffer per writing kernel

    def in_place(self, members: Sequence[str], root: str, last_use: int, sizes: Sizes) -> bool:
        """Whether the backward kernel that reads ``root``'s storage last (at ``last_use``)
        writes its output into it (:func:`memopt.memory_rules.in_place_reader`): the storage
        read through one saved member, and no other candidate claimed that kernel."""
        fw_root = self.fw_by_name.get(root)
        read = [
            b
            for m in dict.fromkeys(members)
            if (b := self.bw_by_name.get(m)) is not None and b.op == "placeholder"
        ]
        read = [b for b in read if b.users]
        if fw_root is None or facts.aliased_input(fw_root) is not None or len(read) != 1:
            return False
        buf = read[0]
        reader = rules.in_place_reader(buf, self.bw_pos, sizes.of)
        if reader is None or self.bw_pos[reader] != last_use or reader in self.in_place_claimed:
            return False
        self.in_place_claimed.add(reader)
        return True

    def offload_layer(self, members: Sequence[str]) -> int | None:
        """The offload rewrite's layer of a storage: the latest of its saved members'."""
        tags = [
            facts.saved_layer(self.bw_by_name[m], self.fw_by_name[m], self.bw_node_pos)
            for m in members
            if m in self.fw_by_name
            and self.bw_by_name.get(m) is not None
            and self.bw_by_name[m].op == "placeholder"
        ]
        tags = [t for t in tags if t is not None]
        return max(tags) if tags else None


def _candidate(
    a: Analysis, g: _Graphs, sizes: Sizes, layer_index, min_offload_bytes, reads, gateless=()
):
    members = [m for m in (a.root, *a.members) if m in g.fw_pos or m in g.bw_by_name]
    fpos = [g.fw_pos[m] for m in members if m in g.fw_pos]
    # alive in the forward until the last kernel that reads the storage through any alias;
    # making a view reads nothing, and a view made only to be saved is not made when the
    # tensor is recomputed or offloaded instead
    freads = [min(fpos)] if fpos else []
    for m in members:
        if m not in g.fw_pos:
            continue
        for u in facts.alias_users(g.fw_by_name[m]):
            if u.op != "output" and facts.aliased_input(u) is None:
                freads.extend(p for p in [g.fw_reads.at(u)] if p is not None)
    users = [u for m in members if m in g.bw_by_name for u in facts.alias_users(g.bw_by_name[m])]
    uses = [p for u in users if (p := g.bw_reads.at(u)) is not None]
    nbytes = sizes.expr(a.nbytes)
    if not fpos or not uses:
        return None
    if nbytes is None:
        sizes.unknown.add(a.root)  # kept: the planner cannot weigh what it cannot size
        return None
    rec = a.recompute_nodes.get(Strategy.RECOMPUTE, ())
    comp = a.recompute_nodes.get(Strategy.COMPROMISE)
    kept, rec_kept = None, 0
    if Strategy.COMPROMISE in a.savings:
        saving = sizes.expr(a.savings[Strategy.COMPROMISE])
        kept = None if saving is None else nbytes - saving
    if Strategy.RECOMPUTE in a.savings:  # the RNG state a seeded recompute saves
        saving = sizes.expr(a.savings[Strategy.RECOMPUTE])
        rec_kept = 0 if saving is None else max(0, nbytes - saving)
    tag = g.offload_layer(members)
    tag = tag if tag is not None else a.layer
    layer = layer_index.get(tag)

    def cost(names):
        return tuple(op_cost(g.joint_by_name[x], sizes) for x in names)

    reused = g.in_place(members, a.root, max(uses), sizes)

    return Candidate(
        name=a.root,
        cluster_id=a.cluster_id or saved_id(a.root),
        occurrence=max(a.occurrence, 0),
        layer=layer,
        nbytes=nbytes,
        produce_pos=min(fpos),
        last_fwd_use_pos=max(freads),
        first_bwd_use_pos=g.bw_reads.first(users),
        last_bwd_use_pos=max(uses),
        recomputable=Strategy.RECOMPUTE in a.savings or Strategy.COMPROMISE in a.savings,
        compromise_only=Strategy.RECOMPUTE not in a.savings and Strategy.COMPROMISE in a.savings,
        recompute_ops=cost(rec or comp or ()),
        compromise_kept_bytes=kept,
        recompute_kept_bytes=rec_kept,
        compromise_ops=cost(comp) if comp else None,
        # a layer without a matmul to order copies by is left on the device by the rewrite
        offloadable=layer is not None and nbytes >= min_offload_bytes and tag not in gateless,
        nbytes_expr=a.nbytes,
        recompute_reads=reads.get(Strategy.RECOMPUTE, ()),
        compromise_reads=reads.get(Strategy.COMPROMISE, ()),
        fused_unless_saved=not any(
            _exists_unsaved(g.fw_by_name[m]) for m in members if m in g.fw_pos
        ),
        # recomputed, it is the graph's own buffer: reused like the kept one (or, made by a
        # kernel Inductor generates, fused into its readers: no longer than that either), so a
        # recompute never holds more than keeping would
        reused_when_recomputed=reused,
        reused_when_kept=reused and facts.storage_root(g.fw_by_name[a.root]).name in g.donated,
    )


def _fused_group(
    a: Analysis, c: Candidate, g: _Graphs, sizes: Sizes, bw_values: Mapping[str, Live]
) -> Candidate:
    """``c`` with ``fused_charges``: a recompute made of pointwise ops only, of ``n`` elements,
    whose inputs the backward's pointwise kernels of ``n`` elements also read, is fused by
    Inductor with them (they share reads: "horizontal" fusion), and they fuse with each other.
    The one kernel runs at the first of them and makes every output there: the recompute's
    own (where the model has it elsewhere) and the later kernels' (the model makes them at
    their own positions). The SwiGLU product recomputed in an FSDP2 layer region: the product,
    the up and the gate gradient in one kernel, six FFN-sized buffers live where the model had
    four (docs/zoo.md, twenty-eighth session). Its ``recompute_ops`` are priced as that kernel
    runs them (:func:`_fused_ops`). ``bw_values``: the backward's values by name
    (:func:`base_items`)."""
    ops = [g.joint_by_name.get(x) for x in a.recompute_nodes.get(Strategy.RECOMPUTE, ())]
    v = facts.tensor_val(g.joint_by_name.get(a.root))
    if not ops or v is None or any(n is None or not rules.fusible(n) for n in ops):
        return c
    members: dict[torch.fx.Node, int] = {}
    unshared = 0  # bytes of the recompute's inputs that no kernel of the group reads anyway
    for name in a.boundary.get(Strategy.RECOMPUTE, ()):
        buf = g.bw_by_name.get(name)
        if buf is None:
            continue
        shared = False
        for reader, same in rules.kernel_readers(buf, g.bw_pos).items():
            out = facts.tensor_val(reader) if reader.op != "output" else None
            same = same and out is not None and known_equal(out.numel(), v.numel())
            if same and rules.fusible(reader):
                members[reader], shared = g.bw_pos[reader], True
        unshared += 0 if shared else sizes.of(buf)
    if not members:
        return c
    c = replace(c, recompute_ops=_fused_ops(c.recompute_ops, c.nbytes + unshared))
    first = min(members.values())
    own = 0 if c.first_bwd_use_pos <= first <= c.bwd_last else c.nbytes
    made = own + sum(sizes.of(m) for m, q in members.items() if q > first)
    # what reads the recompute's output before that kernel runs after it: its outputs are
    # not made yet there (the down projection's weight gradient)
    for m in (x for x in (a.root, *a.members) if x in g.bw_by_name):
        for reader in rules.kernel_readers(g.bw_by_name[m], g.bw_pos):
            item = bw_values.get(reader.name)
            if item is not None and item.start < first <= item.end:
                made -= item.nbytes
    at = min(members, key=members.__getitem__).name
    return replace(c, fused_charges=((first, made),), fused_at=(at,)) if made else c


def _fused_ops(ops: Sequence[OpCost], moved: int) -> tuple[OpCost, ...]:
    """A recompute's ops priced as the one kernel Inductor fuses them into with the backward's
    kernels that read the same inputs (:func:`_fused_group`): their FLOPs and ``moved`` bytes
    (its output written once, and the inputs no kernel of the group reads anyway), not each
    op's own inputs and output; measured kernels (reductions) keep their time."""
    timed = tuple(op for op in ops if op.seconds is not None)
    rest = [op for op in ops if op.seconds is None]
    moved = min(moved, sum(op.bytes for op in rest))  # never above the ops apart
    return (*timed, OpCost(flops=sum(op.flops for op in rest), bytes=moved))


def _undo_reuse(cands: list[Candidate]) -> tuple[Candidate, ...]:
    """Each candidate with ``reuse_undone``: the reused candidates its subgraphs read after
    the kernel that would write into them (a read before it leaves that kernel the buffer's
    last remaining use, and Inductor still writes in place)."""
    reused = {c.name: c for c in cands if c.reused_when_recomputed or c.reused_when_kept}
    out = []
    for c in cands:
        read = sorted(set(c.recompute_reads) | set(c.compromise_reads))
        undone = tuple(
            (r.bwd_last, r.nbytes)
            for x in read
            if (r := reused.get(x)) is not None and c.first_bwd_use_pos >= r.bwd_last
        )
        out.append(replace(c, reuse_undone=undone) if undone else c)
    return tuple(out)


def writes_in_place(reader: torch.fx.Node, buffer: torch.fx.Node, sizes: Sizes) -> bool:
    """Whether Inductor writes ``reader``'s output into ``buffer`` (a node of ``reader``'s
    graph): :func:`memopt.memory_rules.in_place_reader`."""
    ops = [n for n in reader.graph.nodes if n.op == "call_function"]
    return rules.in_place_reader(buffer, {n: i for i, n in enumerate(ops)}, sizes.of) is reader


def donated_saved(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule) -> set[str]:
    """:func:`memopt.memory_rules.donated_saved` of the baseline partition (its user outputs
    are the forward outputs that are no backward input)."""
    tangents = _tangents(fw, bw)
    bw_in = [p for p in bw.graph.find_nodes(op="placeholder") if p.name not in tangents]
    n_user = max(len(fw.graph.output_node().args[0]) - len(bw_in), 0)
    return rules.donated_saved(fw, bw, n_user)


def _exists_unsaved(node: torch.fx.Node) -> bool:
    """Whether the forward still writes ``node`` to memory once it is not a graph output (by
    the fusion rules of :mod:`memopt.memory_rules`)."""
    if facts.aliased_input(node) is not None:
        return False
    if torch.Tag.reduction in getattr(node.target, "tags", ()):
        return True
    return rules.must_exist(node, [u for u in facts.alias_users(node) if u.op != "output"])


def _layout_copies(copies, fw_ops, bw_ops, bw, sizes: Sizes) -> tuple[list[Live], list[Live]]:
    """Each copy lives from its first forward use to the end of the forward and from the
    start of the backward to its last read there (the backward reads it as the placeholder of
    the same name)."""
    fpos = {n: i for i, n in enumerate(fw_ops)}
    bpos = {n: i for i, n in enumerate(bw_ops)}
    by_name = {p.name: p for p in bw.graph.find_nodes(op="placeholder")}
    fw_items, bw_items = [], []
    for p in copies:
        size = sizes.of(p)
        first = min((fpos[u] for u in p.users if u in fpos), default=None)
        if not size or first is None:
            continue
        fw_items.append(Live(p.name, first, len(fw_ops) - 1, size, "layout copy"))
        q = by_name.get(p.name)
        reads = [bpos[u] for u in facts.alias_users(q) if u in bpos] if q is not None else []
        if reads and bw_ops:
            bw_items.append(Live(p.name, 0, max(reads), size, "layout copy"))
    return fw_items, bw_items


def base_items(
    fw: torch.fx.GraphModule,
    bw: torch.fx.GraphModule,
    analysis: Sequence[Analysis],
    sizes: Sizes,
    *,
    pad_matmuls: bool = False,
    layout_copies: Sequence[torch.fx.Node] = (),
    cuda_graphs: bool = False,
) -> tuple[list[torch.fx.Node], list[Live], list[torch.fx.Node], list[Live]]:
    """The forward's and the backward's ops and the non-candidate values live over them (what
    :class:`StepTimeline`'s ``fwd_live_bytes`` / ``bwd_live_bytes`` sum): for reports and
    tests, which can name what is live at a position."""
    usable = [a for a in analysis if a.cluster_id is not None or a.layer is not None]
    skip = {m for a in usable for m in (a.root, *a.members)}
    pad_matmuls = pad_matmuls and not pads_in_graph(fw)
    fw_ops, fw_items = _liveness(fw, skip, sizes, pad_matmuls=pad_matmuls)
    bw_ops, bw_items = _liveness(
        bw,
        skip,
        sizes,
        inputs_live=_tangents(fw, bw),
        pad_matmuls=pad_matmuls,
        inputs_copied=cuda_graphs,
    )
    f_copies, b_copies = _layout_copies(layout_copies, fw_ops, bw_ops, bw, sizes)
    return fw_ops, fw_items + f_copies, bw_ops, bw_items + b_copies


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
    sizes: Sizes | None = None,
    layout_copies: Sequence[torch.fx.Node] = (),
    cuda_graphs: bool = False,
) -> PlanningProblem:
    """``pad_matmuls``: charge the padded operand copies Inductor makes on CUDA (when the
    graph does not hold them already: :func:`pads_in_graph`). ``sizes``
    collects the nodes whose size is unknown (pass one in to read them afterwards).
    ``layout_copies``: saved graph inputs Inductor keeps a channels-last copy of
    (:func:`memopt.facts.layout_copied_inputs`): new memory from their first forward use to
    their last backward read. ``cuda_graphs``: the region runs as CUDA graphs, which copy the
    backward's tangents into their pool (:func:`_liveness`'s ``inputs_copied``)."""
    sizes = sizes if sizes is not None else Sizes(value)
    usable = [a for a in analysis if a.cluster_id is not None or a.layer is not None]
    fw_ops, fw_items, bw_ops, bw_items = base_items(
        fw,
        bw,
        usable,
        sizes,
        pad_matmuls=pad_matmuls,
        layout_copies=layout_copies,
        cuda_graphs=cuda_graphs,
    )
    fw_live, bw_live = _curve(fw_items, len(fw_ops)), _curve(bw_items, len(bw_ops))
    layers, f_starts, b_starts = _layer_events(fw_ops, bw_ops)
    layer_index = {lay: k for k, lay in enumerate(layers)}
    graphs = _Graphs(joint, fw, bw, fw_ops, bw_ops)
    reads = recompute_reads(usable)
    gateless = set(gateless_layers(fw.graph, bw.graph, 1 + max(layers, default=-1)))
    cands = [
        _candidate(a, graphs, sizes, layer_index, min_offload_bytes, reads[a.root], gateless)
        for a in usable
    ]
    bw_values = {it.name: it for it in bw_items if it.kind in ("output", "temporary")}
    cands = [
        c if c is None else _fused_group(a, c, graphs, sizes, bw_values)
        for a, c in zip(usable, cands)
    ]
    names = {c.name for c in cands if c is not None}
    siblings = rerun_siblings(usable, graphs.joint_by_name)
    cands = [
        c
        if c is None or not siblings[c.name]
        else replace(c, rerun_with=tuple(n for n in siblings[c.name] if n in names))
        for c in cands
    ]
    fwd_op_s = tuple(rates_op_s(op_cost(n, sizes)) for n in fw_ops)
    if not fw_ops and not bw_ops:
        # a graph without ops (torch 2.14 folds a lone ``y * 1.0`` away): one idle position,
        # so the step it is part of still has a memory curve to plan on
        fwd_op_s, fw_live = (0.0,), [0]
    timeline = StepTimeline(
        fwd_op_s=fwd_op_s,
        bwd_op_s=tuple(rates_op_s(op_cost(n, sizes)) for n in bw_ops),
        fwd_live_bytes=tuple(fw_live),
        bwd_live_bytes=tuple(bw_live),
        static_bytes=sum(sizes.of(n) for n in fw.graph.nodes if n.op == "placeholder"),
        layer_fwd_start=tuple(f_starts),
        layer_bwd_start=tuple(b_starts),
        fwd_op_names=tuple(n.name for n in fw_ops) if fw_ops else (),
        bwd_op_names=tuple(n.name for n in bw_ops),
    )
    return PlanningProblem(
        candidates=_undo_reuse([c for c in cands if c is not None]),
        timeline=timeline,
        fixed={p.cluster_id: (int(p.strategy), p.count) for p in fixed},
    )
