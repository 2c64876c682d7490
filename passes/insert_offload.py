"""insert_offload_pass: keep the saved activations of chosen layers on the CPU between their
forward and their backward, placed by a per-layer synchronization schedule.

Op pattern for the default entry (offload finishes in the forward, reload starts in the
backward). Every op sits at a matmul (a *gate*): the matmul's activation input ``x`` is routed
through a marker and a barrier, so the op follows the marker (it cannot run early) and the
matmul waits for it (it cannot run late)::

    forward graph                                 backward graph
    t  = producer(...)                            h  = placeholder          # the host copy
    m1 = barrier(x1, [])      # next matmul       m3 = barrier(x3, [])      # first matmul of
    h  = offload(t, m1)                           d  = reload(h, dev, m3)   #   the reload layer
    mm(barrier(m1, [h]), w)                       mm(barrier(m3, [d]), w)
    ...                                           ...
    m2 = barrier(x2, [])      # first matmul of   m4 = barrier(x4, [])      # matmul that first
    h' = wait_offload(h, [t], m2)  # offload_num  d' = wait_reload(d, m4)   #   reads the copy
    mm(barrier(m2, [h']), w)  # t dies here       v  = aten.as_strided(d', ...)  # saved views
    return (..., h', ...)                         mm(v, ...)

``offload_fwd=False`` moves ``wait_offload`` into the backward (the forward returns ``t``
and ``h``); ``reload_fwd=True`` moves ``reload`` and ``wait_reload`` into the forward (it
returns the reloaded tensors). Saved views of one storage are copied once, through their
base, and rebuilt with ``as_strided`` after the reload. No original node gains or loses a
user and the ops sit where Inductor already splits kernels, so fusion and numerics are those
of the same compile without offload.

Reads ``node.meta[LAYER]`` (from ``detect_layers_pass``) and ``node.meta["val"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk
from memopt.facts import saved_layer
from memopt.offload import ops
from memopt.offload.fx_helpers import (
    MOVED,
    GraphIndex,
    fake_mode_of,
    gate_input,
    gateless_layers,
    same_layout,
)
from memopt.offload.result import OffloadedTensor, OffloadResult
from memopt.offload.slots import Slots
from memopt.offload.sync import Schedule, SyncEntry, build_schedule
from memopt.offload.units import Unit, plan_units

aten = torch.ops.aten


@dataclass
class _Gate:
    """A matmul whose activation input ``x`` is routed through barriers."""

    kernel: fx.Node
    x: fx.Node
    marker: fx.Node | None = None
    """``barrier(x, [])``: what copy ops placed at this kernel follow."""
    deps: list[fx.Node] = field(default_factory=list)
    """What the kernel must wait for."""


@dataclass
class _Place:
    before: fx.Node
    after: fx.Node | None
    gate: _Gate | None


@dataclass
class _Rewriter:
    fw: fx.GraphModule
    bw: fx.GraphModule
    slots: Slots
    schedule: Schedule
    fake_mode: object
    banned: set = field(default_factory=set)
    """Storages that must not carry ordering edges (saved placeholders being replaced)."""
    fw_idx: GraphIndex = field(init=False)
    bw_idx: GraphIndex = field(init=False)
    gates: dict[fx.Node, _Gate] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        n = self.schedule.num_layers
        self.fw_idx = GraphIndex.build(self.fw.graph, n, forward=True)
        self.bw_idx = GraphIndex.build(self.bw.graph, n, forward=False)
        self.names = {x.name for g in (self.fw.graph, self.bw.graph) for x in g.nodes}

    # -- node creation ------------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def _new(
        self,
        target,
        args: tuple,
        *,
        before: fx.Node,
        name: str | None = None,
        layer: int | None = None,
        moved: bool = False,
    ) -> fx.Node:
        with before.graph.inserting_before(before):
            node = before.graph.create_node("call_function", target, args, {}, name=name)
        if name is not None:
            self.names.add(node.name)
        vals = fx.node.map_arg(args, lambda a: a.meta["val"])
        with self.fake_mode:
            node.meta["val"] = target(*vals)
        node.meta[mk.LAYER] = layer
        if moved:
            node.meta[MOVED] = True
        return node

    # -- gates and places ---------------------------------------------------------------------
    def _gate(self, kernel: fx.Node | None) -> _Gate | None:
        if kernel is None:
            return None
        if kernel not in self.gates:
            x = self._gate_input(kernel)
            if x is None:
                return None
            self.gates[kernel] = _Gate(kernel, x)
        return self.gates[kernel]

    def _gate_input(self, kernel: fx.Node) -> fx.Node | None:
        if kernel.graph is not self.bw.graph:
            return gate_input(kernel, lambda a: False)
        # a saved placeholder being replaced by its reload cannot carry the reload's order
        return gate_input(kernel, lambda a: compat.storage_key(a.meta["val"]) in self.banned)

    def _marker(self, gate: _Gate) -> fx.Node:
        if gate.marker is None:
            gate.marker = self._new(ops.barrier, (gate.x, []), before=gate.kernel)
        return gate.marker

    def _place_at(self, idx: GraphIndex, point: fx.Node) -> _Place:
        """Ops of a sync point go right before the first gateable matmul from ``point`` on and
        follow its marker; that matmul waits for them."""
        if point is not idx.output:
            for kernel in idx.kernels:
                if idx.pos[kernel] >= idx.pos[point]:
                    gate = self._gate(kernel)
                    if gate is not None:
                        return _Place(kernel, self._marker(gate), gate)
        # At the end of the graph: after the last matmul. Without an input that orders it,
        # Inductor may schedule an op as soon as its inputs exist (a wait right after its
        # copy's issue would stall the compute stream on every copy).
        return _Place(idx.output, idx.kernels[-1] if idx.kernels else None, None)

    def _place_before(
        self, idx: GraphIndex, user: fx.Node, not_before: _Place | None = None
    ) -> _Place:
        """Ops needed by ``user`` go before the last matmul at or ahead of it (kernel
        boundaries are where Inductor already splits kernels), following its marker; never
        ahead of ``not_before``."""
        for kernel in reversed(idx.kernels):
            if idx.pos[kernel] <= idx.pos[user]:
                gate = self._gate(kernel)
                if gate is not None:
                    place = _Place(kernel, self._marker(gate), None)
                    break
        else:
            place = _Place(user, None, None)
        if not_before is not None and idx.pos[place.before] < idx.pos[not_before.before]:
            return _Place(not_before.before, not_before.after, None)
        return place

    def _emit(self, target, args: tuple, place: _Place, *, extra: tuple = (), **kw) -> fx.Node:
        node = self._new(target, (*args, place.after, *extra), before=place.before, **kw)
        if place.gate is not None:
            place.gate.deps.append(node)
        return node

    # -- one unit -----------------------------------------------------------------------------
    def apply(self, u: Unit) -> None:
        n, fw_idx, p = self.schedule.num_layers, self.fw_idx, u.source
        s = self.schedule.get(u.layer)
        host_name = self._unique(f"{p.name}_host")
        fwd_wait = s.offload_done.forward
        # issued at the first matmul after the producer, which waits for the issue
        issue = self._place_at(fw_idx, fw_idx.nodes[fw_idx.pos[p] + 1])
        flat = not fwd_wait and _flattens(p)
        h = self._emit(
            ops.offload,
            (p,),
            issue,
            extra=_host_layout(p),
            layer=u.layer,
            name=None if fwd_wait or flat else host_name,
        )
        device = p.meta["val"].device
        if not fwd_wait:
            self._offload_done_in_backward(u, self._flat(h, host_name) if flat else h, device)
            return
        place = self._place_at(fw_idx, fw_idx.point_node(s.offload_done.layer(n), True))
        moved = place.before is not fw_idx.output and fw_idx.pos[place.before] <= fw_idx.pos[p]
        if moved:
            later = [x for x in fw_idx.starts.values() if fw_idx.pos[x] > fw_idx.pos[p]]
            place = self._place_at(
                fw_idx, min(later, key=fw_idx.pos.__getitem__, default=fw_idx.output)
            )
            self.notes.append(
                f"{p.name}: produced after its offload sync point; wait moved to {place.before.name}"
            )
        flat = not s.reload_start.forward and _flattens(p)
        name = None if s.reload_start.forward or flat else host_name
        h2 = self._emit(ops.wait_offload, (h, [p]), place, name=name, layer=u.layer, moved=moved)
        if s.reload_start.forward:
            self._reload_in_forward(u, h2, place, device)
            return
        out = self._flat(h2, host_name) if flat else h2
        hp = self._unflat(self.slots.replace_with_host(u.members, out), p)
        self._reload_in_backward(u, hp, device, keep=None, not_before=None)

    def _flat(self, host: fx.Node, name: str) -> fx.Node:
        """The forward's host copy returned as one flat dimension (an ``as_strided`` of it):
        Inductor lays out a 4-D forward output saved for backward channels-last where its
        layout optimization prefers (graphs with convolutions), which for a host tensor is a
        CPU-side transposing copy into pageable memory, reloaded without overlap (Mamba2 on the
        H100, fifty-fifth session); an ``as_strided`` input and a 1-D output it leaves as they are."""
        n = compat.int_hint(host.meta["val"].numel())
        return self._new(aten.as_strided.default, (host, [n], [1], 0), before=host.next, name=name)

    def _unflat(self, ph: fx.Node, source: fx.Node) -> fx.Node:
        """The backward's view of a flat host copy in the traced layout (``_flat``'s inverse),
        or ``ph`` itself where the copy was not flattened."""
        if not _flattens(source) or source.meta["val"].dim() == 1:
            return ph
        shape = [compat.int_hint(x) for x in source.meta["val"].shape]
        (stride,) = _host_layout(source)
        first = next(n for n in ph.graph.nodes if n.op != "placeholder")
        return self._new(aten.as_strided.default, (ph, shape, list(stride), 0), before=first)

    def _offload_done_in_backward(self, u: Unit, h: fx.Node, device) -> None:
        n, bw_idx = self.schedule.num_layers, self.bw_idx
        s = self.schedule.get(u.layer)
        hp = self._unflat(self.slots.add_host(h), u.source)
        members = [self.slots.bw_node(i) for i in u.members]
        first = bw_idx.first_user(members)
        if first is None:
            raise AssertionError(f"{u.source.name}: saved for backward but never used there")
        place = self._place_at(bw_idx, bw_idx.point_node(s.offload_done.layer(n), False))
        moved = place.before is bw_idx.output or bw_idx.pos[place.before] > bw_idx.pos[first]
        if moved:
            self.notes.append(f"{u.source.name}: used in backward before its offload finishes")
            place = self._place_before(bw_idx, first)
        hw = self._emit(ops.wait_offload, (hp, members), place, layer=u.layer, moved=moved)
        self._reload_in_backward(u, hw, device, keep=hw, not_before=place)

    def _reload_in_forward(self, u: Unit, h2: fx.Node, wait: _Place, device) -> None:
        n, fw_idx = self.schedule.num_layers, self.fw_idx
        s = self.schedule.get(u.layer)
        place = self._place_at(fw_idx, fw_idx.point_node(s.reload_start.layer(n), True))
        moved = fw_idx.pos[place.before] < fw_idx.pos[wait.before]
        if moved:
            place = wait
        layout = _host_layout(u.source)  # the traced layout, whatever Inductor gave the host
        d = self._emit(ops.reload, (h2, device), place, extra=layout, layer=u.layer, moved=moved)
        out = self._place_before(fw_idx, fw_idx.output, not_before=place)
        d2 = self._emit(ops.wait_reload, (d,), out, layer=u.layer)
        for i in u.members:
            rebuilt = self._rebuild(d2, u, self.slots.fw_node(i), before=fw_idx.output)
            self.slots.replace_fw(i, rebuilt)

    def _reload_in_backward(
        self, u: Unit, src: fx.Node, device, *, keep: fx.Node | None, not_before: _Place | None
    ) -> None:
        n, bw_idx = self.schedule.num_layers, self.bw_idx
        s = self.schedule.get(u.layer)
        members = [self.slots.bw_node(i) for i in u.members]
        first = bw_idx.first_user(members)
        if first is None:
            raise AssertionError(f"{u.source.name}: saved for backward but never used there")
        place = self._place_at(bw_idx, bw_idx.point_node(s.reload_start.layer(n), False))
        moved = False
        if not_before is not None and bw_idx.pos[place.before] < bw_idx.pos[not_before.before]:
            place, moved = not_before, True
        if place.before is bw_idx.output or bw_idx.pos[place.before] > bw_idx.pos[first]:
            self.notes.append(
                f"{u.source.name}: first used in backward before its reload point; "
                f"reload moved before its first use ({first.name})"
            )
            place, moved = self._place_before(bw_idx, first, not_before=not_before), True
        layout = _host_layout(u.source)  # the traced layout, whatever Inductor gave the host
        d = self._emit(ops.reload, (src, device), place, extra=layout, layer=u.layer, moved=moved)
        wait = self._place_before(bw_idx, first, not_before=place)
        d2 = self._emit(ops.wait_reload, (d,), wait, layer=u.layer)
        for i, ph in zip(u.members, members):
            rebuilt = self._rebuild(d2, u, self.slots.fw_node(i), before=first)
            for user in list(ph.users):
                if user is not keep:
                    user.replace_input_with(ph, rebuilt)

    def _rebuild(self, d2: fx.Node, u: Unit, member: fx.Node, before: fx.Node) -> fx.Node:
        mv, sv = member.meta["val"], u.source.meta["val"]
        if member is u.source or same_layout(mv, sv):
            return d2
        offset = mv.storage_offset() - sv.storage_offset()
        args = (d2, list(mv.shape), list(mv.stride()), offset)
        return self._new(aten.as_strided.default, args, before=before, layer=u.layer)

    # -- barriers -------------------------------------------------------------------------------
    def splice_gates(self) -> None:
        """Route each gate's input through ``marker`` and ``barrier(deps)``."""
        for gate in self.gates.values():
            head = gate.marker if gate.marker is not None else gate.x
            if gate.deps:
                layer = gate.kernel.meta.get(mk.LAYER)
                head = self._new(
                    ops.barrier, (head, list(gate.deps)), before=gate.kernel, layer=layer
                )
            if head is not gate.x:
                gate.kernel.replace_input_with(gate.x, head)


#: Why a unit stays on the device when its layer has no kernel to order the copies by.
GATELESS = (
    "layer {layer} has no matmul in its {where} to order its copies by (a conv-only block): "
    "offloading would queue every copy at the graph's next matmul, serialized with compute"
)


def _drop_gateless(units, kept, slots: Slots, fw: fx.Graph, bw: fx.Graph, num_layers: int):
    """Units whose layer has no gate kernel (matmul) in its forward or backward region stay on
    the device, said in ``kept``: their copies would drift to a later layer's gate (ResNet:
    every offload and its wait at the classifier, every reload at the start of the backward;
    measured on an H100 at +404% step time)."""
    missing = gateless_layers(fw, bw, num_layers)
    out, kept = [], list(kept)
    for u in units:
        if u.layer in missing:
            reason = GATELESS.format(layer=u.layer, where=" and ".join(missing[u.layer]))
            kept.extend((i, slots.fw_node(i).name, reason) for i in u.members)
        else:
            out.append(u)
    return out, kept


def insert_offload_pass(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    *,
    sync: Mapping[int, SyncEntry] | Schedule,
    num_fwd_outputs: int,
    num_layers: int | None = None,
    saved_indices_to_offload: Sequence[int] | None = None,
    layer_of_saved: Mapping[int, int | None] | None = None,
    min_bytes: int = 1 << 20,
) -> OffloadResult:
    """Offload saved activations of the layers in ``sync`` (edits both graphs in place).

    ``saved_indices_to_offload`` index the saved tensors: forward output
    ``num_fwd_outputs + i``, backward placeholder ``num_saved_symints + i`` (default: all).
    A saved tensor belongs to the layer whose backward uses it first (``meta[LAYER]`` of its
    first backward user; else of its producer); ``layer_of_saved[i]`` overrides that.
    Saved tensors smaller than ``min_bytes`` (per host copy), graph inputs, and storages also
    returned by other outputs stay on the device; the result says why.
    """
    if num_layers is None:
        tags = [x.meta.get(mk.LAYER) for x in fw_gm.graph.nodes]
        num_layers = 1 + max((t for t in tags if t is not None), default=-1)
    schedule = sync if isinstance(sync, Schedule) else build_schedule(sync, num_layers)
    slots = Slots.read(fw_gm.graph, bw_gm.graph, num_fwd_outputs)
    indices = (
        range(slots.num_tensors)
        if saved_indices_to_offload is None
        else sorted(set(saved_indices_to_offload))
    )
    for i in indices:
        if not 0 <= i < slots.num_tensors:
            raise IndexError(f"saved index {i} out of range: {slots.num_tensors} saved tensors")

    bw_pos = {x: k for k, x in enumerate(bw_gm.graph.nodes)}

    def layer_of(i: int) -> int | None:
        if layer_of_saved is not None and i in layer_of_saved:
            return layer_of_saved[i]
        return saved_layer(slots.bw_node(i), slots.fw_node(i), bw_pos)

    units, kept = plan_units(slots, indices, layer_of, schedule, min_bytes)
    units, kept = _drop_gateless(units, kept, slots, fw_gm.graph, bw_gm.graph, schedule.num_layers)
    fake_mode = fake_mode_of(fw_gm.graph, bw_gm.graph)
    banned = {compat.storage_key(slots.bw_node(i).meta["val"]) for u in units for i in u.members}
    rw = _Rewriter(fw_gm, bw_gm, slots, schedule, fake_mode, banned)
    if units and not ops.install_inductor_lowerings():
        rw.notes.append(
            "this torch's Inductor gives no alignment hints for reloaded tensors: kernels "
            "reading them may round differently from the run without offload"
        )
    for u in units:
        rw.apply(u)
    rw.splice_gates()
    slots.write()
    for gm in (fw_gm, bw_gm):
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    offloaded = tuple(
        OffloadedTensor(
            layer=u.layer,
            source=u.source.name,
            saved=tuple(slots.original_name(i) for i in u.members),
            saved_indices=tuple(u.members),
            nbytes=u.nbytes,
            via_base=u.via_base,
        )
        for u in units
    )
    synchronous = any(u.source.meta["val"].device.type != "cuda" for u in units)
    return OffloadResult(
        fw=fw_gm,
        bw=bw_gm,
        schedule=schedule,
        offloaded=offloaded,
        kept=tuple(sorted(kept)),
        notes=tuple(rw.notes),
        synchronous=synchronous,
    )


def _flattens(p: fx.Node) -> bool:
    """Whether the forward returns ``p``'s host copy flat (``Rewriter._flat``): where its shape
    and layout are static (a flat size and the view back are written as numbers)."""
    return bool(_host_layout(p)) and all(isinstance(x, int) for x in p.meta["val"].shape)


def _host_layout(p: fx.Node) -> tuple:
    """The host copy's strides as the offload op's argument: the traced tensor's layout
    (``ops.host_stride`` of its meta), so the host copy has the layout the graph was traced
    with even when Inductor hands the op the tensor in another one; empty (the op decides at
    run time) where a stride is symbolic."""
    strides = ops.host_stride(p.meta["val"])
    if not all(isinstance(x, int) for x in strides):
        return ()
    return (list(strides),)
