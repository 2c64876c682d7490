"""The saved-tensor slots that a partitioned forward graph returns and its backward graph takes.

``min_cut_rematerialization_partition`` returns a forward graph whose outputs are the real
outputs (the first ``num_fwd_outputs``), then the saved tensors (those stashed on ctx
without a version-counter check last), then saved opaque objects and SymInts; the backward
graph's placeholders are the saved SymInts, then the saved tensors in the same order, then
opaque objects and tangents. AOTAutograd re-derives the counts from the forward graph's
outputs, so slots may be replaced, removed or added as long as both sides stay in step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from memopt import _torch_compat as compat
from memopt.facts import is_rng_state


@dataclass
class _Entry:
    fw: fx.Node
    bw: fx.Node
    original: int | None
    no_vc_check: bool
    removed: bool = False


def _is_tensor(x: object) -> bool:
    return isinstance(x, fx.Node) and isinstance(x.meta.get("val"), torch.Tensor)


class Slots:
    """Read the slots, edit them, then :meth:`write` both graphs consistently."""

    def __init__(self, fw: fx.Graph, bw: fx.Graph, num_fwd_outputs: int):
        self.fw, self.bw, self.num_fwd_outputs = fw, bw, num_fwd_outputs
        self.output = fw.find_nodes(op="output")[0]
        outs = list(self.output.args[0])
        self.real = outs[:num_fwd_outputs]
        saved = outs[num_fwd_outputs:]
        k = 0
        while k < len(saved) and _is_tensor(saved[k]):
            k += 1
        self.rest = saved[k:]
        num_sym = sum(1 for x in self.rest if isinstance(x, fx.Node) and _is_sym(x))
        phs = list(bw.find_nodes(op="placeholder"))
        saved_phs = phs[num_sym : num_sym + k]
        self.after_phs = phs[num_sym + k :]
        # the RNG state saved for a recomputed seeded op (an SDPA kernel) is renamed in backward
        names = [p.name for p in saved_phs]
        fw_names = [s.name for s in saved[:k]]
        if len(names) != k or any(
            s.name != b and not is_rng_state(s) for s, b in zip(saved[:k], names)
        ):
            raise ValueError(
                "forward saved outputs and backward placeholders do not match: "
                f"{fw_names} vs {names}"
            )
        flag = compat.NO_VC_CHECK_META
        self.entries = [
            _Entry(s, p, i, bool(s.meta.get(flag, False)))
            for i, (s, p) in enumerate(zip(saved[:k], saved_phs))
        ]
        self.originals = [(e.fw, e.bw) for e in self.entries]
        self.added: list[_Entry] = []
        self.dead_phs: list[fx.Node] = []

    @classmethod
    def read(cls, fw: fx.Graph, bw: fx.Graph, num_fwd_outputs: int) -> Slots:
        return cls(fw, bw, num_fwd_outputs)

    @property
    def num_tensors(self) -> int:
        return len(self.entries)

    def fw_node(self, i: int) -> fx.Node:
        """The forward node originally saved in slot ``i``."""
        return self.originals[i][0]

    def bw_node(self, i: int) -> fx.Node:
        """The backward placeholder originally bound to slot ``i``."""
        return self.originals[i][1]

    def original_name(self, i: int) -> str:
        return self.originals[i][1].name

    def other_holder(self, root: fx.Node, members: set[int]) -> str | None:
        """What else keeps ``root``'s storage alive past the forward (a forward output, or a
        saved value not being offloaded), described for the report; None if nothing."""
        rv = root.meta["val"]
        for o in self.real:
            if _is_tensor(o) and compat.same_storage(o.meta["val"], rv):
                return f"the forward also returns it ({o.name})"
        for i, (fw, _) in enumerate(self.originals):
            if i not in members and _is_tensor(fw) and compat.same_storage(fw.meta["val"], rv):
                return f"saved value {fw.name} keeps its storage"
        return None

    def replace_with_host(self, members: list[int], host: fx.Node) -> fx.Node:
        """Slot ``members[0]`` now carries ``host``; the other members' slots are dropped.
        Returns the new backward placeholder (named like ``host``)."""
        first = self.entries[members[0]]
        with self.bw.inserting_before(first.bw):
            ph = self.bw.placeholder(host.name)
        _copy_placeholder_meta(ph, host, first.bw)
        self.dead_phs.extend(self.entries[i].bw for i in members)
        first.fw, first.bw = host, ph
        for i in members[1:]:
            self.entries[i].removed = True
        return ph

    def add_host(self, host: fx.Node) -> fx.Node:
        """A new slot for ``host`` (before the no-version-check tensors)."""
        boundary = next((e.bw for e in self.entries if e.no_vc_check), None)
        if boundary is None and self.after_phs:
            boundary = self.after_phs[0]
        if boundary is not None:
            ctx = self.bw.inserting_before(boundary)
        else:
            last = list(self.bw.find_nodes(op="placeholder"))[-1]
            ctx = self.bw.inserting_after(last)
        with ctx:
            ph = self.bw.placeholder(host.name)
        _copy_placeholder_meta(ph, host, None)
        self.added.append(_Entry(host, ph, None, False))
        return ph

    def replace_fw(self, i: int, node: fx.Node) -> None:
        """Slot ``i`` now returns ``node`` (same backward placeholder)."""
        e = self.entries[i]
        if e.no_vc_check:
            node.meta[compat.NO_VC_CHECK_META] = True
        e.fw = node

    def write(self) -> None:
        """Write the forward outputs and drop the backward placeholders no longer bound."""
        flag = compat.NO_VC_CHECK_META
        live = [e for e in self.entries if not e.removed]
        vc = [e for e in live if not e.no_vc_check]
        no_vc = [e for e in live if e.no_vc_check]
        for e in no_vc:
            e.fw.meta[flag] = True
        saved = [e.fw for e in vc + self.added + no_vc] + list(self.rest)
        old_descs = self.output.meta.get("desc")
        self.output.args = ((*self.real, *saved),)
        if isinstance(old_descs, list):
            flags = [bool(isinstance(x, fx.Node) and x.meta.get(flag)) for x in saved]
            descs = compat.saved_for_backward_descs(flags)
            if descs is not None:
                self.output.meta["desc"] = list(old_descs[: len(self.real)]) + descs
        for ph in self.dead_phs:
            if ph.users:
                raise AssertionError(f"placeholder {ph.name} still used after its reload")
            self.bw.erase_node(ph)


def _is_sym(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.SymInt | torch.SymFloat | torch.SymBool | int)


def _copy_placeholder_meta(ph: fx.Node, src: fx.Node, old: fx.Node | None) -> None:
    ph.meta["val"] = src.meta["val"]
    if old is not None:
        for key in ("partitioner_tag", "desc"):
            if key in old.meta:
                ph.meta[key] = old.meta[key]
    else:
        ph.meta["partitioner_tag"] = "is_forward"
