"""insert_offload_pass: keep the saved activations of chosen layers on the CPU between their
forward and their backward, placed by a per-layer synchronization schedule.

Op pattern for the default entry (offload finishes in the forward, reload starts in the
backward); every edge is a data edge, so Inductor's reordering keeps the order::

    forward graph                                  backward graph
    t  = producer(...)                             h  = placeholder        # the host copy
    h  = memopt.offload(t)                         ...                     # sync: reload
    y' = memopt.barrier(y, [h])  # next op         d  = memopt.reload(h, dev, after=a)
    ...                          # reads y'        g' = memopt.barrier(g, [d])  # layer reads g'
    h' = memopt.wait_offload(h, [t], after=a)      ...
    x' = memopt.barrier(x, [h'])  # sync: layer    d' = memopt.wait_reload(d, after=b)
    ...   # offload_num begins on x'; t dies       v  = aten.as_strided(d', ...)  # views
    return (..., h', ...)                          first_use(v)

``offload_fwd=False`` moves ``wait_offload`` into the backward (the forward returns ``t``
and ``h``); ``reload_fwd=True`` moves ``reload`` and ``wait_reload`` into the forward (it
returns the reloaded tensors). Saved views of one storage are copied once, through their
base, and rebuilt with ``as_strided`` after the reload. ``after`` anchors and barriers only
ever hang on realized tensors (see ``memopt.offload.fx_helpers``), so they change no fusion.

Reads ``node.meta[LAYER]`` (from ``detect_layers_pass``) and ``node.meta["val"]``; writes
``node.meta[DECISION] = "offload"`` on the copied nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from memopt import meta_keys as mk
from memopt.offload import ops
from memopt.offload.fx_helpers import MOVED, GraphIndex, fake_mode_of, same_layout
from memopt.offload.result import OffloadedTensor, OffloadResult
from memopt.offload.slots import Slots
from memopt.offload.sync import Schedule, SyncEntry, build_schedule
from memopt.offload.units import Unit, plan_units

aten = torch.ops.aten


@dataclass
class _Rewriter:
    fw: fx.GraphModule
    bw: fx.GraphModule
    slots: Slots
    schedule: Schedule
    fake_mode: object
    fw_idx: GraphIndex = field(init=False)
    bw_idx: GraphIndex = field(init=False)
    deps: dict[tuple[bool, fx.Node], list[fx.Node]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    sync_nodes: set[fx.Node] = field(default_factory=set)

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
        graph: fx.Graph,
        target,
        args: tuple,
        *,
        before: fx.Node | None = None,
        after: fx.Node | None = None,
        name: str | None = None,
        layer: int | None = None,
        moved: bool = False,
    ) -> fx.Node:
        ctx = graph.inserting_before(before) if before is not None else graph.inserting_after(after)
        with ctx:
            node = graph.create_node("call_function", target, args, {}, name=name)
        if name is not None:
            self.names.add(node.name)
        vals = fx.node.map_arg(args, lambda a: a.meta["val"])
        with self.fake_mode:
            node.meta["val"] = target(*vals)
        node.meta[mk.LAYER] = layer
        if moved:
            node.meta[MOVED] = True
        return node

    def _gate(self, backward: bool, at: fx.Node, dep: fx.Node, *, sync: bool = True) -> None:
        """Make the first extern kernel from ``at`` on wait for ``dep``."""
        idx = self.bw_idx if backward else self.fw_idx
        if at is not idx.output:
            self.deps.setdefault((backward, at), []).append(dep)
            if sync:
                self.sync_nodes.add(at)

    # -- one unit -----------------------------------------------------------------------------
    def apply(self, u: Unit) -> None:
        n = self.schedule.num_layers
        s = self.schedule.get(u.layer)
        assert s is not None
        fw_idx, p = self.fw_idx, u.source
        host_name = self._unique(f"{p.name}_host")
        fwd_wait = s.offload_done.forward
        h = self._new(
            self.fw.graph,
            ops.offload,
            (p,),
            after=p,
            layer=u.layer,
            name=None if fwd_wait else host_name,
        )
        p.meta[mk.DECISION] = "offload"
        following = fw_idx.nodes[fw_idx.pos[p] + 1]
        self._gate(False, following, h, sync=False)  # issue the copy before the next kernel
        device = p.meta["val"].device
        if not fwd_wait:
            self._offload_done_in_backward(u, h, host_name, device)
            return
        at = fw_idx.point_node(s.offload_done.layer(n), forward=True)
        moved = at is not fw_idx.output and fw_idx.pos[at] <= fw_idx.pos[p]
        if moved:
            later = [x for x in fw_idx.starts.values() if fw_idx.pos[x] > fw_idx.pos[p]]
            at = min(later, key=fw_idx.pos.__getitem__, default=fw_idx.output)
            self.notes.append(
                f"{p.name}: produced after its offload sync point; wait moved to {at.name}"
            )
        after = fw_idx.anchor_at(at)
        wait_name = None if s.reload_start.forward else host_name
        h2 = self._new(
            self.fw.graph,
            ops.wait_offload,
            (h, [p], after),
            before=at,
            name=wait_name,
            layer=u.layer,
            moved=moved,
        )
        self._gate(False, at, h2)
        if s.reload_start.forward:
            self._reload_in_forward(u, h2, at, device)
            return
        hp = self.slots.replace_with_host(u.members, h2, self.fake_mode)
        self._reload_in_backward(u, hp, device, keep_users=())

    def _offload_done_in_backward(self, u: Unit, h: fx.Node, host_name: str, device) -> None:
        n, bw_idx = self.schedule.num_layers, self.bw_idx
        s = self.schedule.get(u.layer)
        hp = self.slots.add_host(h)
        members = [self.slots.bw_node(i) for i in u.members]
        first = bw_idx.first_user(members)
        at = bw_idx.point_node(s.offload_done.layer(n), forward=False)
        moved = first is not None and (at is bw_idx.output or bw_idx.pos[at] > bw_idx.pos[first])
        if moved:
            self.notes.append(f"{u.source.name}: used in backward before its offload finishes")
            at = first
        hw = self._new(
            self.bw.graph,
            ops.wait_offload,
            (hp, members, bw_idx.anchor_at(at)),
            before=at,
            layer=u.layer,
            moved=moved,
        )
        if at is not first:
            self._gate(True, at, hw)
        self._reload_in_backward(u, hw, device, keep_users=(hw,), not_before=at)

    def _reload_in_forward(self, u: Unit, h2: fx.Node, wait_at: fx.Node, device) -> None:
        n, fw_idx = self.schedule.num_layers, self.fw_idx
        s = self.schedule.get(u.layer)
        at = fw_idx.point_node(s.reload_start.layer(n), forward=True)
        moved = at is not fw_idx.output and fw_idx.pos[at] < fw_idx.pos.get(wait_at, 0)
        if moved:
            at = wait_at
        d = self._new(
            self.fw.graph,
            ops.reload,
            (h2, device, fw_idx.anchor_at(at)),
            before=at,
            layer=u.layer,
            moved=moved,
        )
        self._gate(False, at, d)
        out = fw_idx.output
        d2 = self._new(self.fw.graph, ops.wait_reload, (d, None), before=out, layer=u.layer)
        for i in u.members:
            rebuilt = self._rebuild(self.fw.graph, d2, u, self.slots.fw_node(i), before=out)
            self.slots.replace_fw(i, rebuilt)

    def _reload_in_backward(
        self,
        u: Unit,
        src: fx.Node,
        device,
        *,
        keep_users: tuple,
        not_before: fx.Node | None = None,
    ) -> None:
        n, bw_idx = self.schedule.num_layers, self.bw_idx
        s = self.schedule.get(u.layer)
        members = [self.slots.bw_node(i) for i in u.members]
        first = bw_idx.first_user(members)
        if first is None:
            raise AssertionError(f"{u.source.name}: saved for backward but never used there")
        at = bw_idx.point_node(s.reload_start.layer(n), forward=False)
        moved = False
        if not_before is not None and bw_idx.pos[at] < bw_idx.pos[not_before]:
            at, moved = not_before, True
        if at is bw_idx.output or bw_idx.pos[at] > bw_idx.pos[first]:
            self.notes.append(
                f"{u.source.name}: first used in backward before its reload point; "
                f"reload moved to its first use ({first.name})"
            )
            at, moved = first, True
        d = self._new(
            self.bw.graph,
            ops.reload,
            (src, device, bw_idx.anchor_at(at)),
            before=at,
            layer=u.layer,
            moved=moved,
        )
        if at is not first:
            self._gate(True, at, d)
        d2 = self._new(
            self.bw.graph,
            ops.wait_reload,
            (d, bw_idx.anchor_of(first)),
            before=first,
            layer=u.layer,
        )
        for i, ph in zip(u.members, members):
            rebuilt = self._rebuild(self.bw.graph, d2, u, self.slots.fw_node(i), before=first)
            for user in list(ph.users):
                if user not in keep_users:
                    user.replace_input_with(ph, rebuilt)

    def _rebuild(
        self, graph: fx.Graph, d2: fx.Node, u: Unit, member: fx.Node, before: fx.Node
    ) -> fx.Node:
        mv, sv = member.meta["val"], u.source.meta["val"]
        if member is u.source or same_layout(mv, sv):
            return d2
        offset = mv.storage_offset() - sv.storage_offset()
        args = (d2, list(mv.shape), list(mv.stride()), offset)
        return self._new(graph, aten.as_strided.default, args, before=before, layer=u.layer)

    # -- barriers -------------------------------------------------------------------------------
    def place_barriers(self) -> None:
        """One barrier per sync point, on the input of the next extern kernel."""
        current: dict[tuple[bool, fx.Node, fx.Node], fx.Node] = {}
        for (backward, at), deps in self.deps.items():
            idx = self.bw_idx if backward else self.fw_idx
            graph = self.bw.graph if backward else self.fw.graph
            gate = idx.gate_after(at)
            if gate is None:
                if at in self.sync_nodes:
                    self.notes.append(f"no kernel after {at.name} to gate; ordering not pinned")
                continue
            kernel, x = gate
            cur = current.get((backward, kernel, x), x)
            b = self._new(
                graph,
                ops.barrier,
                (cur, list(deps)),
                before=kernel,
                layer=kernel.meta.get(mk.LAYER),
            )
            kernel.replace_input_with(cur, b)
            current[(backward, kernel, x)] = b


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
        for user in sorted(slots.bw_node(i).users, key=bw_pos.__getitem__):
            if user.meta.get(mk.LAYER) is not None:
                return user.meta[mk.LAYER]  # the layer whose backward needs it first
        return slots.fw_node(i).meta.get(mk.LAYER)

    units, kept = plan_units(slots, indices, layer_of, schedule, min_bytes)
    fake_mode = fake_mode_of(fw_gm.graph, bw_gm.graph)
    rw = _Rewriter(fw_gm, bw_gm, slots, schedule, fake_mode)
    for u in units:
        rw.apply(u)
    rw.place_barriers()
    slots.write(fake_mode)
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
