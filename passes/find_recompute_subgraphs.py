"""find_recompute_subgraphs_pass: for each saved storage group, search bottom-up for a subgraph
that can recompute it in backward.

Reads ``node.meta[SAVED_INDEX]`` (from find_saved_activations_pass), ``original_aten`` and
``nn_module_stack``; returns one :class:`Subgraph` per saved storage group.

The search walks producers from the root over an allow-list that depends on the probe level
(0: elementwise, casts, views, gather/slice/where/expand; 1: also matmuls, convolutions,
norms, softmax and fused attention kernels). A subgraph that reruns an attention kernel is
marked (``SavedActivation.attention``): levels leave it kept, plan strings and the budget
planner may choose it.
A branch stops at an input that is already saved or is a graph input. Random ops (dropout,
an attention kernel whose ``dropout_p`` is not 0) end the search: recomputing them would draw
new numbers. So does an attention kernel in a graph Inductor lays out channels-last (it holds
convolutions: ``attention=False``): torch wraps a recomputed attention kernel in an RNG-state
op whose inputs Inductor then lays out channels-last, and the kernel's results are wrong
(diffusers' Transformer2DModel on CPU, torch 2.13: a loss of nan or inf; fifty-eighth session,
docs/data/sweep4/REPORT.md). A second search, the *compromise*,
treats the input of a widening cast as a boundary, so that the smaller pre-cast tensor is
saved instead of the root.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx

from memopt import meta_keys as mk
from memopt.facts import attention_dropout, is_widening_cast, op_class
from memopt.facts import packet as _packet
from memopt.passes.find_saved_activations import SavedGroup

aten = torch.ops.aten

#: Op classes allowed in recompute subgraphs, per probe level.
_BASIC = frozenset({"view", "pointwise", "cast", "gather", "constant"})
PROBE_ALLOW = {
    0: _BASIC,
    1: _BASIC | {"matmul", "convolution", "norm", "softmax", "attention"},
}
#: Op classes counted against a subgraph's ``max_matmuls``: a convolution or an attention
#: kernel is a matmul (an attention kernel's outputs, read through ``getitem``, count once).
HEAVY = frozenset({"matmul", "convolution", "attention"})
ATTENTION_CHANNELS_LAST = (
    "attention kernel in a graph Inductor lays out channels-last (it holds convolutions): "
    "recomputed there it would read channels-last inputs and give wrong results"
)


@dataclass(frozen=True)
class Search:
    """Result of one bottom-up search."""

    nodes: tuple[torch.fx.Node, ...]  # topological order, root chain included
    inputs: tuple[torch.fx.Node, ...]  # boundary: saved activations or graph inputs
    reason: str | None  # why the search failed (None: success)


@dataclass(frozen=True)
class Subgraph:
    """Recompute candidates for one saved storage group."""

    group: SavedGroup
    full: Search
    compromise: Search | None  # None when there is no widening cast to stash instead
    compromise_stash: torch.fx.Node | None  # the smaller tensor saved under compromise


def _search(
    group: SavedGroup,
    saved: set[torch.fx.Node],
    allow: frozenset,
    cap: int,
    order: dict[torch.fx.Node, int],
    extra_stop: frozenset = frozenset(),
    max_matmuls: int = 1,
    attention: bool = True,
) -> Search:
    sub: set[torch.fx.Node] = set()
    inputs: set[torch.fx.Node] = set()
    stack = [group.root, *group.members]
    roots = {group.root, *group.members}
    reason = None
    matmuls = 0
    while stack:
        n = stack.pop()
        if n in sub or n in inputs:
            continue
        val = n.meta.get(mk.TORCH_VAL)
        if n.op == "placeholder" or not isinstance(val, torch.Tensor | tuple | list):
            inputs.add(n)  # graph inputs and SymInt/scalar producers
            continue
        if n not in roots and (n in saved or n in extra_stop):
            inputs.add(n)
            continue
        if n.op != "call_function":
            reason = f"{n.op} {n.name} cannot be recomputed"
            break
        cls = op_class(n)
        if cls == "attention" and attention_dropout(n):
            src = n.args[0] if n.target is operator.getitem else n
            reason = (  # its dropout_p is not the constant 0, or it has none to read
                f"op {_packet(src.target)} may drop out (recomputing would change the numbers)"
            )
            break
        if cls == "random":
            reason = f"random op {_packet(n.target)} (recomputing would change the numbers)"
            break
        if cls == "attention" and not attention:
            reason = ATTENTION_CHANNELS_LAST
            break
        if cls not in allow:
            src = n.args[0] if n.target is operator.getitem else n
            reason = f"op {_packet(src.target)} ({cls}) is not in the probe-level allow-list"
            break
        if cls in HEAVY and n.target is not operator.getitem:
            matmuls += 1
            if matmuls > max_matmuls:
                reason = f"needs more than {max_matmuls} matmul(s) to recompute"
                break
        sub.add(n)
        if len(sub) > cap:
            reason = f"subgraph larger than the cap of {cap} ops"
            break
        stack.extend(n.all_input_nodes)
    return Search(
        nodes=tuple(sorted(sub, key=order.__getitem__)),
        inputs=tuple(sorted(inputs, key=order.__getitem__)),
        reason=reason,
    )


def find_recompute_subgraphs_pass(
    gm: torch.fx.GraphModule,
    groups: Sequence[SavedGroup],
    *,
    probe_level: int,
    max_nodes: int,
    max_matmuls: int = 1,
    attention: bool = True,
) -> tuple[torch.fx.GraphModule, list[Subgraph]]:
    """``attention``: whether an attention kernel may be recomputed (False in a graph Inductor
    lays out channels-last: the module's docstring)."""
    allow = PROBE_ALLOW[probe_level]
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    saved = {m for g in groups for m in (g.root, *g.members)}
    saved |= {n for n in gm.graph.nodes if mk.SAVED_INDEX in n.meta}
    out: list[Subgraph] = []
    for g in groups:
        full = _search(
            g, saved, allow, max_nodes, order, max_matmuls=max_matmuls, attention=attention
        )
        compromise, stash = None, None
        casts = [n for n in (full.nodes or _casts_above(g, order)) if is_widening_cast(n)]
        for cast in reversed(casts):  # the cast nearest to the root first
            src = cast.args[0]
            if src in saved or src.op == "placeholder":
                continue  # stashing it is free: that is the full recompute
            s = _search(
                g,
                saved,
                allow,
                max_nodes,
                order,
                extra_stop=frozenset({src}),
                max_matmuls=max_matmuls,
                attention=attention,
            )
            if s.reason is None:
                compromise, stash = s, src
                break
        sub = Subgraph(g, full, compromise, stash)
        out.append(sub)
    return gm, out


def _casts_above(group: SavedGroup, order: dict, limit: int = 64) -> list[torch.fx.Node]:
    """Widening casts reachable above the root through single-input chains (for compromise
    when the full search failed)."""
    found, stack, seen = [], [group.root], set()
    while stack and len(seen) < limit:
        n = stack.pop()
        if n in seen or n.op != "call_function":
            continue
        seen.add(n)
        if is_widening_cast(n):
            found.append(n)
            continue
        stack.extend(n.all_input_nodes)
    return sorted(found, key=order.__getitem__)
