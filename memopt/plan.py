"""Plan strings: ``ClusterId:Strategy:Count``.

* ``ClusterId`` -- an ORT-style cluster name such as ``BiasGelu+`` or ``Reshape+Where+``, or
  the short form the report prints for a long one (``MaskedFill+…+Slice+#3f2a``; ``...`` may
  stand for the ellipsis), resolved against the region's ids (:func:`expand_short_ids`).
* ``Strategy`` -- 0 keep, 1 recompute, 2 recompute with compromise, 3 offload to CPU.
* ``Count`` -- ``-1`` for every occurrence, ``N > 0`` for the first N in forward order.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memopt.errors import PlanError
from memopt.format import SHORT_ID_RE, short_id_matches


class Strategy(enum.IntEnum):
    KEEP = 0
    RECOMPUTE = 1
    COMPROMISE = 2
    OFFLOAD = 3


#: Strategies this build can apply.
SUPPORTED_STRATEGIES = frozenset(Strategy)

_CLUSTER_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\+(?:[A-Za-z][A-Za-z0-9_]*\+)*$")


@dataclass(frozen=True)
class PlanSpec:
    """One parsed plan string."""

    cluster_id: str
    strategy: Strategy
    count: int

    def __str__(self) -> str:
        return f"{self.cluster_id}:{int(self.strategy)}:{self.count}"

    def applies_to(self, occurrence_index: int) -> bool:
        """Whether the occurrence with this 0-based forward-order index is covered."""
        return self.count < 0 or occurrence_index < self.count


def parse_plan(text: str) -> PlanSpec:
    """Parse one ``ClusterId:Strategy:Count`` string; raise PlanError naming the bad field."""
    raw = text
    text = text.strip()
    parts = text.split(":")
    if len(parts) != 3:
        raise PlanError(
            f"plan {raw!r}: expected 3 fields 'ClusterId:Strategy:Count' separated by ':', "
            f"got {len(parts)} field(s)"
        )
    cid, strat, count = (p.strip() for p in parts)
    if not cid:
        raise PlanError(f"plan {raw!r}: field ClusterId is empty")
    if not _CLUSTER_RE.match(cid) and not SHORT_ID_RE.match(cid):
        hint = " (cluster ids end with '+', e.g. 'BiasGelu+')" if not cid.endswith("+") else ""
        raise PlanError(
            f"plan {raw!r}: field ClusterId {cid!r} is not a cluster id: op names made of "
            f"letters, digits and '_', each followed by '+'{hint}, or a short id as the "
            "report prints it ('MatMul+…+Add+#5f1c')"
        )
    try:
        s = int(strat)
    except ValueError:
        raise PlanError(
            f"plan {raw!r}: field Strategy {strat!r} is not an integer "
            "(0 keep, 1 recompute, 2 recompute with compromise, 3 offload)"
        ) from None
    if s not in {int(x) for x in Strategy}:
        raise PlanError(
            f"plan {raw!r}: field Strategy {s} is out of range "
            "(0 keep, 1 recompute, 2 recompute with compromise, 3 offload)"
        )
    if Strategy(s) not in SUPPORTED_STRATEGIES:
        raise PlanError(
            f"plan {raw!r}: field Strategy {s} ({Strategy(s).name.lower()}) is not supported by "
            "this build; use 1 (recompute) or 2 (recompute with compromise)"
        )
    try:
        n = int(count)
    except ValueError:
        raise PlanError(
            f"plan {raw!r}: field Count {count!r} is not an integer (-1 for all, N>0 for the first N)"
        ) from None
    if n == 0 or n < -1:
        raise PlanError(
            f"plan {raw!r}: field Count {n} is invalid (-1 for all occurrences, N>0 for the "
            "first N; use strategy 0 to keep a cluster)"
        )
    return PlanSpec(cid, Strategy(s), n)


def localize(plans: Iterable[PlanSpec], before: Mapping[str, int]) -> tuple[PlanSpec, ...]:
    """The plans one compiled run applies when Counts count over the training step: a plan
    for the first ``N`` occurrences, after ``before[cluster]`` occurrences in earlier runs,
    covers the first ``N - before`` here; none left keeps the cluster (the plan still wins
    over the level, as it does for occurrences past ``N`` inside one graph)."""
    out = []
    for p in plans:
        done = before.get(p.cluster_id, 0)
        if p.count < 0 or done == 0:
            out.append(p)
        elif done >= p.count:
            out.append(PlanSpec(p.cluster_id, Strategy.KEEP, -1))
        else:
            out.append(PlanSpec(p.cluster_id, p.strategy, p.count - done))
    return tuple(out)


def names(plan_id: str, cluster_id: str) -> bool:
    """Whether a plan's cluster id (full or short) names the graph's ``cluster_id``."""
    return plan_id == cluster_id or short_id_matches(plan_id, cluster_id)


def expand_short_ids(plans: Iterable[PlanSpec], known: Iterable[str]) -> tuple[PlanSpec, ...]:
    """Plans whose cluster id is a short form (``head…tail#tag``) with the full id from
    ``known`` it names; one naming none stays as written (decide calls it unknown), one naming
    several is an error that lists them."""
    known = sorted(set(known))
    out = []
    for p in plans:
        if SHORT_ID_RE.match(p.cluster_id) is None or p.cluster_id in known:
            out.append(p)
            continue
        hits = [k for k in known if short_id_matches(p.cluster_id, k)]
        if len(hits) > 1:
            raise PlanError(
                f"plan '{p}': the short id {p.cluster_id!r} names {len(hits)} clusters "
                f"({', '.join(hits)}); give more hash digits after '#' or the full id"
            )
        out.append(PlanSpec(hits[0], p.strategy, p.count) if hits else p)
    by_id = {}
    for p in out:  # a later plan for the same cluster replaces an earlier one
        by_id.pop(p.cluster_id, None)
        by_id[p.cluster_id] = p
    return tuple(by_id.values())


def parse_plans(value: str | Iterable[str] | None) -> tuple[PlanSpec, ...]:
    """Parse a comma-separated plan list, a JSON file path holding a list, or an iterable.

    A later plan for the same cluster replaces an earlier one.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        items = _split_plan_text(value)
    elif isinstance(value, Mapping):
        raise PlanError(
            f"config={_short(value)}: a frozen plan (a dict) goes in as its file's path, or as "
            "config=plan['config'], sync=plan['sync']"
        )
    elif not isinstance(value, Iterable):
        raise PlanError(
            f"config={_short(value)}: expected plan strings such as 'BiasGelu+:1:-1' (one "
            "string, comma-separated, or a list of them) or a plan file path"
        )
    else:
        items = []
        for v in value:
            if isinstance(v, PlanSpec):
                items.append(str(v))
            elif isinstance(v, str):
                items.extend(_split_plan_text(v))
            else:
                raise PlanError(f"plan {v!r}: expected a string 'ClusterId:Strategy:Count'")
    by_id: dict[str, PlanSpec] = {}
    for item in items:
        spec = parse_plan(item)
        by_id.pop(spec.cluster_id, None)
        by_id[spec.cluster_id] = spec
    return tuple(by_id.values())


def _split_plan_text(value: str) -> list[str]:
    value = value.strip()
    if not value:
        return []
    if _is_plan_file(value):
        return _load_plan_file(value)
    return [p for p in (s.strip() for s in value.split(",")) if p]


def _is_plan_file(value: str) -> bool:
    """Whether a plan setting names a JSON file rather than listing plans (a plan string has
    no path separator: a missing file is said to be missing, not parsed as plans)."""
    return value.endswith(".json") or os.path.sep in value or os.path.isfile(value)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_plan_file(path: str) -> object:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise PlanError(f"plan file {path!r} does not exist") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"plan file {path!r} is not valid JSON: {e}") from None


def _load_plan_file(path: str) -> list[str]:
    """A plan file holds a JSON list of plan strings, or a frozen budget plan: an object with
    ``"config"`` (that list, or one comma-separated string) and ``"sync"`` (the sync dict)."""
    data = _read_plan_file(path)
    if isinstance(data, dict) and "config" in data:
        data = data["config"]
        if isinstance(data, str):
            data = data.split(",")
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise PlanError(
            f"plan file {path!r} must hold a JSON list of plan strings such as "
            '["BiasGelu+:1:-1"], or an object {"config": [...], "sync": {...}}'
        )
    return [x.strip() for x in data if x.strip()]


#: Settings a frozen plan file carries beside its plan strings.
PLAN_FILE_SETTINGS = ("sync", "offload_layers")


def plan_file_settings(value: object) -> dict[str, object]:
    """What a frozen plan file (``value`` is a plan file path) sets beside its plan strings:
    its ``"sync"`` dict and, when the step plan offloaded layers across regions,
    ``"offload_layers"``. Empty for plan strings and plain lists."""
    if not isinstance(value, str):
        return {}
    value = value.strip()
    if not _is_plan_file(value):
        return {}
    data = _read_plan_file(value)
    if not isinstance(data, dict):
        return {}
    return {k: data[k] for k in PLAN_FILE_SETTINGS if data.get(k) not in (None, {}, 0)}
