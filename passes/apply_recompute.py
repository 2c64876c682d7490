"""apply_recompute_pass: tag the joint graph so the min-cut partitioner recomputes what was
decided.

Pattern (for a recomputed root r with boundary inputs b1..bk)::

    b1..bk  [MUST_SAVE]  ->  ops of the subgraph [MUST_RECOMPUTE]  ->  r [MUST_RECOMPUTE]

Compromise (strategy 2) is the same with the widening cast's input among the boundary inputs,
so the smaller pre-cast tensor is what backward keeps. Reads the decisions and the candidates'
node lists; writes ``node.meta["recompute"]`` (torch's key).
A node that one decision recomputes is never forced to be saved by another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.fx

from memopt import meta_keys as mk
from memopt._torch_compat import CheckpointPolicy
from memopt.candidates import SavedActivation
from memopt.plan import Strategy


def apply_recompute_pass(
    gm: torch.fx.GraphModule,
    candidates: Sequence[SavedActivation],
    per_root: Mapping[str, Strategy],
) -> torch.fx.GraphModule:
    by_name = {n.name: n for n in gm.graph.nodes}
    recompute: set[str] = set()
    save: set[str] = set()
    for c in candidates:
        s = per_root.get(c.root)
        if s not in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
            continue
        recompute.update(c.recompute_nodes[s])
        save.update(c.boundary[s])
    for name in recompute:
        n = by_name[name]
        n.meta[mk.TORCH_RECOMPUTE] = CheckpointPolicy.MUST_RECOMPUTE
    for name in save - set(recompute):
        n = by_name[name]
        if n.op == "call_function" and isinstance(n.meta.get(mk.TORCH_VAL), torch.Tensor):
            n.meta[mk.TORCH_RECOMPUTE] = CheckpointPolicy.MUST_SAVE
    return gm
