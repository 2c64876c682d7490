"""Which saved tensors the offload rewrite copies, and through which node (plain decisions
over a partitioned forward graph; the rewrite reads them).

Saved tensors that share a storage (a tensor and its views, interleaved q/k/v slices of one
projection) form one unit and are copied once, through their base when the layouts are
static; each saved value is rebuilt from the reloaded copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.fx as fx

from memopt import _torch_compat as compat
from memopt.facts import storage_root
from memopt.offload import ops
from memopt.offload.fx_helpers import is_static, nbytes_hint, same_layout
from memopt.offload.slots import Slots
from memopt.offload.sync import Schedule


@dataclass
class Unit:
    """One host copy: ``source`` is copied; every member (saved index) is rebuilt from it."""

    source: fx.Node
    members: list[int]
    layer: int
    nbytes: int
    via_base: bool


#: Why a chosen saved tensor stays on the device (``OffloadResult.kept``). The first four are
#: expected (inputs never move, unscheduled layers were not asked for); the others are news.
GRAPH_INPUT = "a graph input"
VIEW_OF_INPUT = "a view of a graph input"
NO_LAYER = "in no detected layer"
UNSCHEDULED = "layer {layer} is not in the sync dict"
TOO_SMALL = "{nbytes} bytes < min_bytes={min_bytes}"


def plan_units(
    slots: Slots,
    indices: Sequence[int],
    layer_of: Callable[[int], int | None],
    schedule: Schedule,
    min_bytes: int,
) -> tuple[list[Unit], list[tuple[int, str, str]]]:
    """Group the chosen saved tensors by storage and decide what each group copies."""
    kept: list[tuple[int, str, str]] = []
    by_root: dict[fx.Node, list[int]] = {}
    for i in indices:
        node = slots.fw_node(i)
        layer = layer_of(i)
        reason = None
        if node.op == "placeholder":
            reason = GRAPH_INPUT
        elif storage_root(node).op == "placeholder":
            reason = VIEW_OF_INPUT
        elif layer is None:
            reason = NO_LAYER
        elif schedule.get(layer) is None:
            reason = UNSCHEDULED.format(layer=layer)
        if reason:
            kept.append((i, node.name, reason))
        else:
            by_root.setdefault(storage_root(node), []).append(i)
    units = []
    for root, members in by_root.items():
        unit, reason = _make_unit(slots, root, members, layer_of)
        if unit is not None and unit.nbytes < min_bytes:
            unit, reason = None, TOO_SMALL.format(nbytes=unit.nbytes, min_bytes=min_bytes)
        if unit is None:
            kept.extend((i, slots.fw_node(i).name, reason) for i in members)
        else:
            units.append(unit)
    return units, kept


def _make_unit(slots: Slots, root: fx.Node, members: list[int], layer_of) -> tuple:
    rv = root.meta["val"]
    member_nodes = [slots.fw_node(i) for i in members]
    if root.target is torch.ops.aten.cat.default:
        # ConvBERT's cat -> view_30 (CPU, torch 2.13, forty-eighth session): offloaded, the
        # dense layer reading it got wrong gradients (Inductor writes a cat's inputs into its
        # buffer as slices; not yet pinned down further)
        return None, "a concatenation's output (Inductor writes it in slices)"
    holder = slots.other_holder(root, set(members))
    if holder is not None:
        return None, holder
    layer = max(layer_of(i) for i in members)  # the first backward to need any of them
    total = compat.int_hint(rv.numel())
    covering = [
        m
        for m in member_nodes
        if ops.is_dense(m.meta["val"]) and compat.int_hint(m.meta["val"].numel()) == total
    ]
    # Prefer copying the base: it exists as soon as its producer ran, while a saved view may
    # be created late (the partitioner moves backward-only views to the end of the forward).
    static = is_static(rv) and all(is_static(m.meta["val"]) for m in member_nodes)
    if root.op == "call_function" and ops.is_dense(rv) and (static or root in member_nodes):
        source = root
    else:
        source = covering[0] if covering else None
    if source is None:
        return None, "a partial view whose base cannot be copied (non-dense or symbolic)"
    # A member rebuilt from the copy is an ``as_strided`` of it, read with the traced strides:
    # the reload copies back into the traced layout (``_host_layout``), whatever layout
    # Inductor's layout optimization gave the host copy. Before it did, lone saved views
    # rebuilt so got wrong gradients in graphs with convolutions (ConvBERT's permute of an
    # unfold, Mamba2's gated-norm reshape, FocalNet's split; tests/test_offload_sweep.py)
    # a view in another dtype (view_as_complex: Llama 4's rotary) is no as_strided of its base
    if any(m.meta["val"].dtype != source.meta["val"].dtype for m in member_nodes):
        lone = member_nodes[0]
        if len(member_nodes) > 1 or not ops.is_dense(lone.meta["val"]):
            return None, "saved views in another dtype than their base"
        source = lone  # copied itself
    sv = source.meta["val"]
    for m in member_nodes:
        mv = m.meta["val"]
        if m is not source and not same_layout(mv, sv) and not (is_static(mv) and is_static(sv)):
            return None, "views of one storage with symbolic layouts"
    return Unit(source, members, layer, nbytes_hint(sv), via_base=source not in member_nodes), ""
