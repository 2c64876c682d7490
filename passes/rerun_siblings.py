"""What a recompute remakes besides its own candidate (``Candidate.rerun_with``): read by the
planner's memory model (:func:`memopt.planner.memory.rerun_intervals`)."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import torch.fx

from memopt import memory_rules as rules
from memopt.candidates import SavedActivation as Analysis
from memopt.plan import Strategy


def rerun_siblings(
    analysis: Sequence[Analysis], joint_by_name: Mapping[str, torch.fx.Node]
) -> dict[str, tuple[str, ...]]:
    """Per candidate: the other candidates its recompute remakes. The rewrite tags its
    subgraph's nodes recomputed; the partitioner then saves no other candidate that is one of
    them, nor one whose own subgraph is these nodes plus its root, when that root costs
    nothing to make again (an output of a multi-output op the subgraph reruns: recomputing an
    attention kernel's output remakes its log-sum-exp and Philox seed and offset; a pointwise
    op of a recomputed value: GPT-2's LayerNorm ``rsqrt / n`` beside its normalized input)
    (``Candidate.rerun_with``)."""
    nodes = {a.root: set(a.recompute_nodes.get(Strategy.RECOMPUTE, ())) for a in analysis}
    having: dict[str, list[str]] = {}
    for root, ns in nodes.items():
        for x in ns:
            having.setdefault(x, []).append(root)
    out: dict[str, set[str]] = {root: set() for root in nodes}
    for b, ns in nodes.items():
        node = joint_by_name.get(b)
        for a in having.get(b, ()):  # b is a node of a's subgraph
            out[a].add(b)
        rest = ns - {b}
        if not rest or node is None or not (node.target is operator.getitem or rules.fusible(node)):
            continue
        for a in having.get(next(iter(rest)), ()):
            if a != b and rest <= nodes[a]:
                out[a].add(b)
    return {root: tuple(sorted(v - {root})) for root, v in out.items()}
