"""The one place where a region's plan is decided: candidates + settings -> :class:`Plan`
(plain data in, plain data out; no FX).

Levels, plan strings, the sync dict, ``offload_layers`` and the budget planner (whose answer
arrives as plan strings and a sync dict, exactly as a frozen plan file would) are ways to fill
the same record. Both rewrites (``passes/apply_recompute.py``, ``passes/offload_step.py``)
read only the Plan. Levels: 0 applies only explicit plans; 1 recomputes every cluster whose
default strategy is 1; 2 also applies every compromise (strategy-2) cluster. Explicit plans
win over the level.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import sympy

from memopt.candidates import SavedActivation
from memopt.errors import PlanError
from memopt.format import short_id_suggestions
from memopt.offload.region_layers import slice_schedule
from memopt.offload.sync import SyncEntry, build_schedule, default_sync
from memopt.plan import PlanSpec, Strategy
from memopt.planner.chains import MAX_RECOMPUTE_DEPTH, acceptance_key

#: A saved tensor that no cluster can recompute is named ``Saved_<root>+`` (its node name in
#: the joint graph) by the budget planner; plans may keep (0) or offload (3) it by that id.
SAVED_ID_PREFIX = "Saved_"


def saved_id(root: str) -> str:
    """The stable id a candidate root carries (``Saved_<Op>_<module>_<k>+``, see
    :class:`memopt.candidates.RootName`), else ``Saved_<root>+`` for a plain name."""
    return getattr(root, "saved_id", None) or f"{SAVED_ID_PREFIX}{root}+"


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
class Plan:
    """A region's decision record: what happens to each saved tensor, and when offloaded
    tensors move. Frozen; every rewrite reads it and nothing else decides."""

    per_root: Mapping[str, Strategy]
    """Saved tensor (candidate root) -> applied strategy; absent: kept."""
    clusters: tuple[ClusterDecision, ...]
    """Per cluster: what was asked, what was applied, the bytes saved (the report's rows)."""
    unknown_plans: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    sync: Mapping[int, SyncEntry] | None = None
    """The offload schedule (per layer), None when nothing is offloaded."""
    offload_layers: int = 0
    """With ``offload_layers=k``: every saved tensor of the scheduled layers moves, not only
    strategy-3 tensors."""
    num_layers: int = 0
    """Repeated layers in this region (what the sync dict's layer indices refer to)."""

    def plan_strings(self) -> tuple[str, ...]:
        """The applied plans as ``ClusterId:Strategy:Count`` strings."""
        return tuple(
            f"{c.cluster_id}:{int(c.strategy)}:{c.count}" for c in self.clusters if c.enabled
        )

    def frozen(self) -> dict:
        """The plan file (``MEMOPT_CONFIG=file.json``) that reproduces this plan."""
        sync = {str(k): list(v) for k, v in (self.sync or {}).items()}
        return {"config": list(self.plan_strings()), "sync": sync}


def decide(
    candidates: Sequence[SavedActivation],
    *,
    level: int,
    plans: Sequence[PlanSpec],
    known_elsewhere: Collection[str] = (),
    withheld: Mapping[str, str] | None = None,
    strict: bool = False,
    value: Callable[[sympy.Expr], int | None] = lambda e: None,
    layer_names: Sequence[str] = (),
    offload_layers: int = 0,
    sync: Mapping[int, SyncEntry] | None = None,
    max_depth: int = MAX_RECOMPUTE_DEPTH,
    layer_slice: tuple[int, int] | None = None,
) -> Plan:
    """``value`` evaluates a symbolic size at the compile-time sizes (orders conflicts).
    ``layer_names``: the region's repeated layers; ``offload_layers`` and ``sync`` are the
    activation-offload settings (see :func:`offload_schedule`; ``layer_slice``: where the
    region's layers sit among the model's, when the user's setting counts those). ``max_depth``: the chain rule
    (:mod:`memopt.planner.chains`); a planner's plans are applied at the depth it solved with.
    ``withheld``: op names (a cluster id's tokens) this region never recomputes, with the reason
    a plan naming them is told."""
    by_cluster = _by_cluster(candidates, plans)
    warnings: list[str] = []
    unknown = _unknown_plans(plans, by_cluster, known_elsewhere, withheld or {}, strict, warnings)
    plan_by_id = {p.cluster_id: p for p in plans}
    requested = {
        cid: _requested(cid, occ, level, plan_by_id.get(cid), strict, warnings)
        for cid, occ in by_cluster.items()
    }
    per_root, skipped = _resolve_chains(by_cluster, requested, value, max_depth)
    clusters = tuple(
        _cluster_decision(cid, occ, requested[cid], per_root, skipped.get(cid, 0))
        for cid, occ in by_cluster.items()
    )
    offloaded = Strategy.OFFLOAD in per_root.values()
    if layer_slice is not None and (offload_layers or sync):
        schedule, note = slice_schedule(*layer_slice, len(layer_names), offload_layers, sync)
    else:
        schedule, note = offload_schedule(len(layer_names), offload_layers, sync, offloaded)
    if note:
        warnings.append(note)
    return Plan(
        per_root,
        clusters,
        tuple(unknown),
        tuple(warnings),
        sync=schedule,
        offload_layers=offload_layers if schedule else 0,
        num_layers=len(layer_names),
    )


def _by_cluster(
    candidates: Sequence[SavedActivation], plans: Sequence[PlanSpec]
) -> dict[str, list[SavedActivation]]:
    """Candidates per cluster id in forward order; a plan for ``Saved_<root>+`` makes a
    one-tensor cluster of a candidate that has none (the planner's ids)."""
    by_cluster: dict[str, list[SavedActivation]] = {}
    for c in candidates:
        if c.cluster_id is not None:
            by_cluster.setdefault(c.cluster_id, []).append(c)
    unclustered = {saved_id(c.root): c for c in candidates if c.cluster_id is None}
    for p in plans:
        pid = p.cluster_id
        if pid in unclustered and pid not in by_cluster:
            by_cluster[pid] = [replace(unclustered[pid], cluster_id=pid, occurrence=0)]
    for occ in by_cluster.values():
        occ.sort(key=lambda c: c.occurrence)
    return by_cluster


def _unknown_plans(plans, by_cluster, known_elsewhere, withheld, strict, warnings) -> list[str]:
    unknown = []
    for p in plans:
        if p.cluster_id in by_cluster or p.cluster_id in known_elsewhere:
            continue
        why = [withheld[t] for t in p.cluster_id.split("+") if t in withheld]
        avail = sorted(set(by_cluster) | set(known_elsewhere))
        close = short_id_suggestions(p.cluster_id, avail)[:3] or difflib.get_close_matches(
            p.cluster_id, avail, n=3, cutoff=0.5
        )
        msg = (
            f"plan '{p}': no cluster {p.cluster_id!r} in this region: {why[0]}"
            if why
            else f"plan '{p}': unknown cluster id {p.cluster_id!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + f" Available cluster ids: {', '.join(avail) if avail else '(none)'}"
        )
        if strict:
            raise PlanError(msg + " (MEMOPT_STRICT=1 makes this an error)")
        unknown.append(str(p))
        warnings.append(msg)
    return unknown


def _requested(cid, occ, level, plan, strict, warnings) -> tuple:
    """``(strategy, count, source, default, available)`` asked for one cluster."""
    available = tuple(sorted({s for c in occ for s in c.savings}))
    default = occ[0].default_strategy
    strategy, count, source = Strategy.KEEP, -1, "default"
    if any(c.attention for c in occ):
        pass  # rerunning an attention kernel: only a plan string or the planner asks for it
    elif level >= 1 and default == Strategy.RECOMPUTE:
        strategy, source = Strategy.RECOMPUTE, "level"
    elif level >= 2 and default == Strategy.COMPROMISE:
        strategy, source = Strategy.COMPROMISE, "level"
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
    return strategy, count, source, default, available


def _cluster_decision(cid, occ, requested, per_root, skipped) -> ClusterDecision:
    strategy, count, source, default, available = requested
    saving = sympy.Integer(0)
    for c in occ:
        s = per_root.get(c.root)
        if s is not None:
            saving += c.nbytes if s == Strategy.OFFLOAD else c.savings[s]
    potential = sum((c.savings[default] for c in occ if default is not None), sympy.Integer(0))
    return ClusterDecision(
        cluster_id=cid,
        default_strategy=default if default is not None else Strategy.KEEP,
        available=available,
        freq=len(occ),
        strategy=strategy,
        count=count,
        source=source,
        saving=sympy.expand(saving),
        potential=sympy.expand(potential),
        skipped=skipped,
    )


def offload_schedule(
    n: int,
    offload_layers: int,
    sync: Mapping[int, SyncEntry] | None,
    offloaded: bool,
) -> tuple[dict[int, SyncEntry] | None, str | None]:
    """The sync dict a region's offload follows, and a note when a setting cannot apply.

    ``sync`` wins; else ``offload_layers=k`` takes the default dict for k of the ``n``
    layers; else strategy-3 tensors take the default for ``n-1`` layers (every layer but the
    last, whose backward comes right after its forward)."""
    if not (offload_layers or sync or offloaded):
        return None, None
    if n == 0 and (offload_layers or sync) and not offloaded:
        # no layers inside this graph: with layers compiled one per region, the step
        # offloads whole runs (memopt.state); it says so when it cannot
        return None, None
    if n == 0:
        return None, (
            "activation offload: no repeated layers in this compiled graph (children of a "
            "ModuleList/Sequential such as model.layers.3); nothing offloaded here. If the "
            "model has layers under another path, pass layers='<module path prefix>'."
        )
    # SyncError is a ConfigError; its messages name the setting ("sync: ...", "offload_layers=")
    if sync:
        build_schedule(sync, n)  # validates layers and order against this region
        return dict(sync), None
    if offload_layers >= n:
        # memopt.optimize already refused k >= the model's layer count where it could count
        # them: here a graph break or a per-block compile left fewer layers in this region
        # (or the model reuses one layer module at every depth, which counts once)
        return None, (
            f"offload_layers={offload_layers}: this compiled region holds {n} layer(s) (a graph "
            "break or a per-block compile split the model, or one layer module is reused at "
            "every depth), and the setting counts layers inside one region, the last of which "
            "cannot be offloaded; nothing offloaded here. A budget plans offload per region."
        )
    return default_sync(n, offload_layers or n - 1), None


def _resolve_chains(
    by_cluster: dict[str, list[SavedActivation]],
    requested: dict[str, tuple],
    value: Callable[[sympy.Expr], int | None],
    max_depth: int = MAX_RECOMPUTE_DEPTH,
) -> tuple[dict[str, Strategy], dict[str, int]]:
    """Accept requested recomputes so that recompute chains stay short.

    A chain (tensor B recomputed from A, A itself recomputed) makes backward rebuild the chain
    from its start; unbounded, along a residual stream, that is every layer at once at the
    start of backward, and the memory comes back. A recompute may read at most
    ``max_depth - 1`` recomputed tensors deep. Explicit plans go first, then larger
    savings; among equal savings, first the tensor that fewer other requested recomputes read
    (accepting a tensor many read would block them all: a patch-embedding convolution against
    every first-block ``Gemm+``), then those without matmuls. A candidate that would make a
    chain too deep is kept (counted in ``skipped``). Offload decisions never conflict.
    """
    picked: list[tuple[str, SavedActivation, Strategy]] = []
    for cid, occ in by_cluster.items():
        strategy, count, source = requested[cid][:3]
        if strategy == Strategy.KEEP:
            continue
        picked += [(source, c, strategy) for c in occ if count < 0 or c.occurrence < count]
    readers = _readers(picked)
    wanted: list[tuple[tuple, SavedActivation, Strategy]] = []
    for source, c, strategy in picked:
        size = value(c.savings.get(strategy, c.nbytes)) or 0
        key = (
            source != "plan",
            *acceptance_key(size, readers.get(c.root, 0), c.cluster_id, c.root),
        )
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
        if max(new_depth.values()) > max_depth:
            skipped[c.cluster_id] = skipped.get(c.cluster_id, 0) + 1
            continue
        producer, inputs = trial_producer, trial_inputs
        per_root[c.root] = s
    return per_root, skipped


def _readers(picked) -> dict[str, int]:
    """Per requested recompute: how many other requested recomputes read one of its tensors
    (accepting it first would deepen their chains)."""
    made = {}
    for _src, c, _s in picked:
        for o in (c.root, *c.members):
            made[o] = c.root
    count: dict[str, int] = {}
    for _src, c, s in picked:
        if s not in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
            continue
        for r in {made[i] for i in c.boundary[s] if i in made and made[i] != c.root}:
            count[r] = count.get(r, 0) + 1
    return count


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
