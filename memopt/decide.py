"""Turn candidates + settings into decisions (plain data in, plain data out; no FX).

Levels: 0 applies only explicit plans; 1 recomputes every cluster whose default strategy is 1;
2 also applies every compromise (strategy-2) cluster. Explicit plans win over the level.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

import sympy

from memopt.candidates import Candidate
from memopt.errors import PlanError
from memopt.plan import PlanSpec, Strategy

#: A saved tensor that no cluster can recompute is named ``Saved_<root>+`` (its node name in
#: the joint graph) by the budget planner; plans may keep (0) or offload (3) it by that id.
SAVED_ID_PREFIX = "Saved_"


def saved_id(root: str) -> str:
    return f"{SAVED_ID_PREFIX}{root}+"


@dataclass(frozen=True)
class ClusterDecision:
    cluster_id: str
    default_strategy: Strategy
    available: tuple[Strategy, ...]
    freq: int
    strategy: Strategy  # applied (KEEP when off)
    count: int  # -1 all, N first N
    source: str  # "level", "plan", "default"
    saving: sympy.Expr  # symbolic bytes saved by the applied strategy (0 when off)
    potential: sympy.Expr  # symbolic bytes saved by the default strategy on all occurrences
    skipped: int = 0  # requested occurrences kept because they would chain recomputes

    @property
    def enabled(self) -> bool:
        return self.strategy != Strategy.KEEP


@dataclass(frozen=True)
class Decisions:
    per_root: dict[str, Strategy]  # candidate root -> applied strategy (absent: keep)
    clusters: tuple[ClusterDecision, ...]
    unknown_plans: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def decide(
    candidates: Sequence[Candidate],
    *,
    level: int,
    plans: Sequence[PlanSpec],
    known_elsewhere: Collection[str] = (),
    strict: bool = False,
    value: Callable[[sympy.Expr], int | None] = lambda e: None,
) -> Decisions:
    """``value`` evaluates a symbolic size at the compile-time sizes (orders conflicts)."""
    by_cluster: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.cluster_id is not None:
            by_cluster.setdefault(c.cluster_id, []).append(c)
    plan_by_id = {p.cluster_id: p for p in plans}
    # a plan for Saved_<root>+ names one saved tensor without a cluster (emitted by the planner)
    unclustered = {saved_id(c.root): c for c in candidates if c.cluster_id is None}
    for pid in plan_by_id:
        if pid in unclustered and pid not in by_cluster:
            by_cluster[pid] = [replace(unclustered[pid], cluster_id=pid, occurrence=0)]
    warnings: list[str] = []
    unknown: list[str] = []
    for p in plans:
        if p.cluster_id in by_cluster or p.cluster_id in known_elsewhere:
            continue
        avail = sorted(set(by_cluster) | set(known_elsewhere))
        close = difflib.get_close_matches(p.cluster_id, avail, n=3, cutoff=0.5)
        msg = (
            f"plan '{p}': unknown cluster id {p.cluster_id!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + f" Available cluster ids: {', '.join(avail) if avail else '(none)'}"
        )
        if strict:
            raise PlanError(msg + " (MEMOPT_STRICT=1 makes this an error)")
        unknown.append(str(p))
        warnings.append(msg)

    requested: dict[str, tuple[Strategy, int, str, Strategy | None, tuple[Strategy, ...]]] = {}
    for cid, occ in by_cluster.items():
        occ.sort(key=lambda c: c.occurrence)
        available = tuple(sorted({s for c in occ for s in c.savings}))
        default = occ[0].default_strategy
        strategy, count, source = Strategy.KEEP, -1, "default"
        if level >= 1 and default == Strategy.RECOMPUTE:
            strategy, source = Strategy.RECOMPUTE, "level"
        elif level >= 2 and default == Strategy.COMPROMISE:
            strategy, source = Strategy.COMPROMISE, "level"
        plan = plan_by_id.get(cid)
        if plan is not None:
            strategy, count, source = plan.strategy, plan.count, "plan"
            if strategy in (Strategy.RECOMPUTE, Strategy.COMPROMISE) and strategy not in available:
                msg = (
                    f"plan '{plan}': cluster {cid!r} does not support strategy "
                    f"{int(strategy)}; available: {', '.join(str(int(s)) for s in available)}"
                )
                if strict:
                    raise PlanError(msg)
                warnings.append(msg + "; the plan is ignored")
                strategy, count, source = Strategy.KEEP, -1, "plan"
        requested[cid] = (strategy, count, source, default, available)

    per_root, skipped = _resolve_chains(by_cluster, requested, value)

    clusters: list[ClusterDecision] = []
    for cid, occ in by_cluster.items():
        strategy, count, source, default, available = requested[cid]
        saving = sympy.Integer(0)
        for c in occ:
            s = per_root.get(c.root)
            if s is None:
                continue
            saving += c.nbytes if s == Strategy.OFFLOAD else c.savings[s]
        potential = sympy.expand(
            sum((c.savings[default] for c in occ if default is not None), sympy.Integer(0))
        )
        clusters.append(
            ClusterDecision(
                cluster_id=cid,
                default_strategy=default if default is not None else Strategy.KEEP,
                available=available,
                freq=len(occ),
                strategy=strategy,
                count=count,
                source=source,
                saving=sympy.expand(saving),
                potential=potential,
                skipped=skipped.get(cid, 0),
            )
        )
    return Decisions(per_root, tuple(clusters), tuple(unknown), tuple(warnings))


#: A recompute may read the output of at most this many chained recomputes (1: none).
MAX_RECOMPUTE_DEPTH = 2


def _resolve_chains(
    by_cluster: dict[str, list[Candidate]],
    requested: dict[str, tuple],
    value: Callable[[sympy.Expr], int | None],
) -> tuple[dict[str, Strategy], dict[str, int]]:
    """Accept requested recomputes so that recompute chains stay short.

    A chain (tensor B recomputed from A, A itself recomputed) makes backward rebuild the chain
    from its start; unbounded, along a residual stream, that is every layer at once at the
    start of backward, and the memory comes back. A recompute may read at most
    ``MAX_RECOMPUTE_DEPTH - 1`` recomputed tensors deep. Explicit plans go first, then larger
    savings, then those without matmuls; a candidate that would make a chain too deep is kept
    (counted in ``skipped``). Offload decisions never conflict.
    """
    wanted: list[tuple[tuple, Candidate, Strategy]] = []
    for cid, occ in by_cluster.items():
        strategy, count, source = requested[cid][:3]
        if strategy == Strategy.KEEP:
            continue
        for c in occ:
            if count < 0 or c.occurrence < count:
                size = value(c.savings.get(strategy, c.nbytes)) or 0
                key = (source != "plan", -size, "Gemm" in cid or "MatMul" in cid, c.root)
                wanted.append((key, c, strategy))
    wanted.sort(key=lambda t: t[0])
    per_root: dict[str, Strategy] = {}
    skipped: dict[str, int] = {}
    producer: dict[str, str] = {}  # tensor name -> root of the accepted recompute producing it
    inputs: dict[str, set[str]] = {}  # accepted root -> its boundary inputs
    for _key, c, s in wanted:
        if s not in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
            per_root[c.root] = s
            continue
        outs = {c.root, *c.members}
        ins = set(c.boundary[s])
        trial_producer = {**producer, **{o: c.root for o in outs}}
        trial_inputs = {**inputs, c.root: ins}
        new_depth = _depths(trial_inputs, trial_producer)
        if max(new_depth.values()) > MAX_RECOMPUTE_DEPTH:
            skipped[c.cluster_id] = skipped.get(c.cluster_id, 0) + 1
            continue
        producer, inputs = trial_producer, trial_inputs
        per_root[c.root] = s
    return per_root, skipped


def _depths(inputs: dict[str, set[str]], producer: dict[str, str]) -> dict[str, int]:
    """Chain depth of each accepted recompute (1 = reads only saved tensors)."""
    memo: dict[str, int] = {}

    def d(root: str, stack: frozenset = frozenset()) -> int:
        if root in memo:
            return memo[root]
        if root in stack:  # cannot happen in a DAG; be safe
            return 10**6
        parents = {producer[i] for i in inputs[root] if i in producer and producer[i] != root}
        memo[root] = 1 + max((d(p, stack | {root}) for p in parents), default=0)
        return memo[root]

    return {r: d(r) for r in inputs}
