"""Recompute chains: how deep recomputes may build on other recomputes.

A recompute that reads a tensor which is itself recomputed rebuilds that one first; along a
residual stream such chains would bring every layer back at once at the start of the backward.
:func:`memopt.decide.decide` therefore keeps a recompute whose chain would be deeper than
:data:`MAX_RECOMPUTE_DEPTH`; the planner obeys the same rule so that its plan is applied as it
is. Depth of a recomputed (or compromised) candidate: 1 + the largest depth of the recomputed
candidates its subgraph reads (``Candidate.recompute_reads`` / ``compromise_reads``); kept and
offloaded ones count 0. Depth only grows when more candidates are recomputed, so the valid
counts of a cluster's option ``(s, n)`` form a prefix ``n <= limit``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence

from memopt.plan import Strategy
from memopt.planner.problem import Candidate

#: A recompute may read the output of at most this many chained recomputes (1: none).
MAX_RECOMPUTE_DEPTH = 2

#: The depth for plans of the budget and step planners in a region that holds at most one
#: layer (FSDP2's per-layer regions, per-block compiles, a loss head): no limit. No residual
#: stream runs through several layers there; attention reads recomputed query and key (rotary
#: embeddings), so rerunning attention and what reads it needs depth 3 and more. The planner
#: prices chains by their liveness (:func:`memopt.planner.memory.chain_intervals`). Levels
#: keep :data:`MAX_RECOMPUTE_DEPTH`.
ONE_LAYER_DEPTH = sys.maxsize


def planner_depth(n_layers: int) -> int:
    """The chain depth the planners use, and :func:`memopt.decide.decide` applies their plans
    with, in a region of ``n_layers`` repeated layers."""
    return ONE_LAYER_DEPTH if n_layers <= 1 else MAX_RECOMPUTE_DEPTH


REBUILT = (Strategy.RECOMPUTE, Strategy.COMPROMISE)

#: Recomputed candidates (index into ``problem.candidates``) and their strategies.
Chosen = Mapping[int, Strategy]


class Chains:
    """The read graph between candidates, by index into ``problem.candidates``."""

    def __init__(self, candidates: Sequence[Candidate], max_depth: int = MAX_RECOMPUTE_DEPTH):
        if max_depth < 1:
            raise ValueError("max_recompute_depth must be at least 1")
        self.max_depth = max_depth
        index = {c.name: i for i, c in enumerate(candidates)}
        self.reads: list[dict[Strategy, tuple[int, ...]]] = []
        self.readers: dict[int, list[tuple[int, Strategy]]] = {}
        for i, c in enumerate(candidates):
            mine = {}
            for s, names in ((REBUILT[0], c.recompute_reads), (REBUILT[1], c.compromise_reads)):
                mine[s] = tuple(
                    dict.fromkeys(index[n] for n in names if n in index and n != c.name)
                )
                for r in mine[s]:
                    self.readers.setdefault(r, []).append((i, s))
            self.reads.append(mine)
        self.active = bool(self.readers)
        """False when no recompute reads another candidate: the rule never binds."""

    def depths(self, chosen: Chosen) -> dict[int, int]:
        """Chain depth of every chosen candidate."""
        memo: dict[int, int] = {}

        def depth(i: int, stack: frozenset[int]) -> int:
            if i not in memo:
                if i in stack:  # a cycle cannot come from a graph; refuse it
                    return self.max_depth + 1
                ins = [r for r in self.reads[i][chosen[i]] if r in chosen]
                memo[i] = 1 + max((depth(r, stack | {i}) for r in ins), default=0)
            return memo[i]

        return {i: depth(i, frozenset()) for i in chosen}

    def ok(self, chosen: Chosen) -> bool:
        return not self.active or max(self.depths(chosen).values(), default=0) <= self.max_depth

    def limit(self, chosen: Chosen, order: Iterable[int], s: Strategy) -> int:
        """How many of ``order`` (a prefix) can take strategy ``s`` on top of ``chosen``
        (which must not contain them) with every depth within the limit."""
        depth = self.depths(chosen)
        if max(depth.values(), default=0) > self.max_depth:
            return 0
        trial = dict(chosen)
        n = 0
        for i in order:
            trial[i] = s
            d = 1 + max((depth[r] for r in self.reads[i][s] if r in depth), default=0)
            if d > self.max_depth or not self._raise(trial, depth, i, d):
                return n
            n += 1
        return n

    def _raise(self, trial: Chosen, depth: dict[int, int], i: int, d: int) -> bool:
        """Set ``depth[i] = d`` and carry the increase to the readers; False when a depth
        goes over the limit (``depth`` is then left part-updated)."""
        depth[i] = d
        todo = [i]
        while todo:
            x = todo.pop()
            for y, s in self.readers.get(x, ()):
                if trial.get(y) != s or depth.get(y, 0) > depth[x]:
                    continue
                if depth[x] + 1 > self.max_depth:
                    return False
                depth[y] = depth[x] + 1
                todo.append(y)
        return True


def saving(c: Candidate, s: Strategy) -> int:
    """Bytes a recompute (``nbytes`` less its RNG state) or compromise (``nbytes`` less the
    stash) saves: decide's ``SavedActivation.savings``, so that both order alike (an attention
    output with its 5,056 B of RNG state ranked above the embedding in the planner and below
    it in decide, and the tiny Llama's plan at budget 0.1 was applied with 13 tensors
    changed)."""
    if s == Strategy.COMPROMISE:
        return c.nbytes - (c.compromise_kept_bytes or 0)
    return c.nbytes - c.recompute_kept_bytes


def acceptance_key(saving: int, readers: int, cluster_id: str, name: str) -> tuple:
    """The order :func:`memopt.decide.decide` accepts requested recomputes in, each unless it
    makes a chain too deep (and :func:`refused` predicts it by): larger saving first; among
    equal savings, first the one that fewer other requested recomputes read (accepting a
    tensor many read would refuse them all); then those without a matmul; then by name."""
    return (-saving, readers, "Gemm" in cluster_id or "MatMul" in cluster_id, name)


def refused(chains: Chains, candidates: Sequence[Candidate], rebuilt: Chosen) -> set[int]:
    """The recomputes :func:`memopt.decide.decide` keeps when plans ask for ``rebuilt``
    (accepted in :func:`acceptance_key` order, each unless it makes a chain too deep)."""

    def key(i: int) -> tuple:
        c = candidates[i]
        readers = {y for y, s in chains.readers.get(i, ()) if y != i and rebuilt.get(y) == s}
        return acceptance_key(saving(c, rebuilt[i]), len(readers), c.cluster_id, c.name)

    accepted: dict[int, Strategy] = {}
    out = set()
    for i in sorted(rebuilt, key=key):
        trial = {**accepted, i: rebuilt[i]}
        if chains.ok(trial):
            accepted = trial
        else:
            out.add(i)
    return out
