"""Turn candidates + settings into decisions (plain data in, plain data out; no FX).

Levels: 0 applies only explicit plans; 1 recomputes every cluster whose default strategy is 1;
2 also applies every compromise (strategy-2) cluster. Explicit plans win over the level.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import sympy

from memopt.candidates import Candidate
from memopt.errors import PlanError
from memopt.plan import PlanSpec, Strategy


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
) -> Decisions:
    by_cluster: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.cluster_id is not None:
            by_cluster.setdefault(c.cluster_id, []).append(c)
    plan_by_id = {p.cluster_id: p for p in plans}
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

    per_root: dict[str, Strategy] = {}
    clusters: list[ClusterDecision] = []
    for cid, occ in by_cluster.items():
        occ = sorted(occ, key=lambda c: c.occurrence)
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
        saving = sympy.Integer(0)
        for c in occ:
            if strategy == Strategy.KEEP or not (count < 0 or c.occurrence < count):
                continue
            per_root[c.root] = strategy
            if strategy == Strategy.OFFLOAD:
                saving += c.nbytes
            else:
                saving += c.savings[strategy]
        potential = sympy.expand(sum((c.savings[default] for c in occ), sympy.Integer(0)))
        clusters.append(
            ClusterDecision(
                cluster_id=cid,
                default_strategy=default,
                available=available,
                freq=len(occ),
                strategy=strategy,
                count=count,
                source=source,
                saving=sympy.expand(saving),
                potential=potential,
            )
        )
    return Decisions(per_root, tuple(clusters), tuple(unknown), tuple(warnings))
