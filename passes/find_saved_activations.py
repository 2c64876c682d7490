"""find_saved_activations_pass: mark the activations the baseline partition saves for backward.

Reads: the names of the forward graph's saved outputs (from a min-cut partition of the same
joint graph). Writes ``node.meta[SAVED_INDEX]`` (forward-order index) on saved activations.
Graph inputs (parameters, user inputs) and saved SymInts are not activations and are skipped.
Returns the graph and the list of saved activation nodes grouped by storage (a saved view and
its saved base share memory, so they count once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.fx

from memopt import meta_keys as mk
from memopt.facts import storage_root


@dataclass(frozen=True)
class SavedGroup:
    """Saved activations that share one storage. ``root`` owns the memory."""

    root: torch.fx.Node
    members: tuple[torch.fx.Node, ...]


def find_saved_activations_pass(
    gm: torch.fx.GraphModule, saved_names: Iterable[str]
) -> tuple[torch.fx.GraphModule, list[SavedGroup]]:
    names = list(saved_names)
    by_name = {n.name: n for n in gm.graph.nodes}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    saved: list[torch.fx.Node] = []
    for name in names:
        n = by_name.get(name)
        if n is None or n.op == "placeholder":
            continue
        if not isinstance(n.meta.get(mk.TORCH_VAL), torch.Tensor):
            continue
        saved.append(n)
    saved.sort(key=order.__getitem__)
    groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for i, n in enumerate(saved):
        n.meta[mk.SAVED_INDEX] = i
        groups.setdefault(storage_root(n), []).append(n)
    out = [
        SavedGroup(root, tuple(members))
        for root, members in sorted(groups.items(), key=lambda kv: order[kv[0]])
        if root.op != "placeholder"  # views of parameters/inputs hold no activation memory
    ]
    return gm, out
