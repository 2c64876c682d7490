"""The plan report: a value with ``.table()`` (text) and ``.to_dict()`` (JSON-serializable).

Each compiled graph (a *region*; graph breaks make several) contributes a :class:`RegionReport`;
:class:`Report` folds them: rows for the same cluster id are summed. Nothing here prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import sympy
from tabulate import tabulate

from memopt.config import MemoptConfig
from memopt.decide import saved_id
from memopt.format import fold_kept_lines, ranges
from memopt.plan import Strategy, names
from memopt.step_report import OUTPUT, StepInfo, step_input_bytes, step_section
from memopt.symbolic import SymbolTable, fmt_bytes

#: Cluster ids longer than this are shortened in the table (with a legend); JSON keeps them.
ID_WIDTH = 40


def _expr_str(e: sympy.Expr) -> str:
    return str(sympy.expand(e))


@dataclass
class RegionReport:
    """What memopt found and did in one compiled graph (plain, JSON-ready data)."""

    index: int
    symbols: dict[str, int]
    clusters: list[dict[str, Any]]
    excluded: list[dict[str, Any]]
    baseline_saved_symbolic: str
    baseline_saved_bytes: int | None
    final_saved_symbolic: str
    final_saved_bytes: int | None
    warnings: list[str] = field(default_factory=list)
    plan_seconds: float = 0.0
    from_cache: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # offload/layers/planner sections

    @staticmethod
    def from_pipeline(index: int, result: Any) -> RegionReport:
        sym: SymbolTable = result.symbols
        clusters = _cluster_rows(result, sym)
        excluded = [
            {
                "root": c.root,
                "reason": c.excluded_reason,
                "bytes": sym.evaluate(c.nbytes),
                "symbolic": _expr_str(c.nbytes),
                "shape": c.shape,
                "dtype": c.dtype,
                "compromise": int(Strategy.COMPROMISE) in [int(s) for s in c.savings],
            }
            for c in result.candidates
            if c.excluded_reason is not None
        ]
        used: set[str] = set()
        for e in [result.baseline_saved, result.final_saved]:
            used |= {str(x) for x in sympy.sympify(e).free_symbols}
        for c in clusters:
            used |= {str(x) for x in sympy.sympify(c["saving_symbolic"]).free_symbols}
        inputs = _saved_inputs(getattr(result, "saved_inputs", ((), ())), sym)
        for e in inputs:
            used |= {str(x) for x in sympy.sympify(e["symbolic"]).free_symbols}
        extra: dict[str, Any] = {}
        if inputs:  # runs may save one storage: counted once per step (step_report)
            extra["saved_inputs"] = inputs
            extra["fwd_outputs"] = result.num_fwd_outputs
        if getattr(result, "layers", None):
            extra["layers"] = {"names": list(result.layers), "foreign": result.foreign_layers}
        off = getattr(result, "offload", None)
        if off is not None:
            extra["offload"] = {**off.to_dict(), "text": off.summary()}
        if result.plan is not None:
            extra["frozen"] = result.plan.frozen()
            if getattr(result, "count_offsets", None) is not None:
                extra["frozen"]["step_config"] = _step_plans(result)
        b = getattr(result, "budget", None)
        if b is not None:
            extra["planner"] = {
                **(b.solution.to_dict() if b.solution is not None else {}),
                "budget_bytes": b.budget_bytes,
                "unknown_sizes": list(b.unknown_sizes),
                # kernels priced by their time on the device, not the roofline (time_kernels)
                "kernels_timed": len(getattr(result, "kernels", None) or {}),
                "text": b.text,
            }
        return RegionReport(
            index=index,
            symbols={k: v for k, v in sym.values.items() if k in used},
            clusters=clusters,
            excluded=excluded,
            baseline_saved_symbolic=_expr_str(result.baseline_saved),
            baseline_saved_bytes=sym.evaluate(result.baseline_saved),
            final_saved_symbolic=_expr_str(result.final_saved),
            final_saved_bytes=sym.evaluate(result.final_saved),
            warnings=list(result.plan.warnings),
            plan_seconds=result.plan_seconds,
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> RegionReport:
        return RegionReport(**dict(d))


def _config_text(config: MemoptConfig, width: int = 60) -> str:
    """The user's plan strings, or their count and the first when they would not fit the
    heading (a frozen plan file holds dozens; the table's ON rows list them)."""
    plans = config.plan_strings()
    text = ",".join(plans) or "not provided"
    if len(text) <= width:
        return text
    return f"{len(plans)} plan strings (their rows are ON in the table)"


@dataclass
class Report:
    """The whole plan report for one optimized model."""

    config: MemoptConfig
    regions: Sequence[RegionReport]
    placement: list[dict[str, Any]] = field(default_factory=list)
    """Parameter / optimizer-state placement rows (memopt.params), when used."""
    step: StepInfo | None = None
    """How the regions ran in a step (None before the first run)."""
    sizes_from: str = "the compiling call"
    """Which call's sizes the byte values are evaluated at (dynamic shapes)."""
    notes: tuple[str, ...] = ()
    """What kept memopt from planning the model at all (memopt.coverage: nothing compiled)."""

    def at(
        self, sizes: Mapping[str, int] | None = None, *, source: str = "chosen sizes", **named: int
    ) -> Report:
        """The report with every byte value evaluated at other sizes of the dynamic
        dimensions (names as in the symbolic column, e.g. ``inputs_input_ids_dim0=8``)."""
        values = {**(sizes or {}), **named}
        known = {k for r in self.regions for k in r.symbols}
        unknown = sorted(set(values) - known)
        if unknown and known:
            raise ValueError(
                f"Report.at: unknown size name(s) {', '.join(unknown)}; this report's dynamic "
                f"sizes are {', '.join(sorted(known))}"
            )
        regions = [_region_at(r, values) for r in self.regions]
        step = self.step
        if step is not None and step.run_sizes and source != "the latest call":
            step = replace(step, run_sizes=())  # chosen sizes hold for every run
        return replace(self, regions=regions, sizes_from=source, step=step)

    def runs(self, region: RegionReport) -> int:
        """Runs of the region per step (1 before the first backward: the forward unknown)."""
        if self.step is None or not self.step.forward_known:
            return 1
        return self.step.sequence.count(region.index)

    def clusters(self) -> list[dict[str, Any]]:
        """Cluster rows summed over regions, sorted by saving (largest first)."""
        rows: dict[str, dict[str, Any]] = {}
        for r in self.regions:
            n = self.runs(r)  # a region that runs once per layer counts once per run
            for c in r.clusters if n else ():
                c = _times(c, n)
                row = rows.get(c["cluster_id"])
                if row is None:
                    rows[c["cluster_id"]] = c
                    continue
                row["freq"] += c["freq"]
                row["skipped"] = row.get("skipped", 0) + c.get("skipped", 0)
                row["enabled"] = row["enabled"] or c["enabled"]
                if row["saving_bytes"] is not None and c["saving_bytes"] is not None:
                    row["saving_bytes"] += c["saving_bytes"]
                else:
                    row["saving_bytes"] = None
                row["saving_symbolic"] = _expr_str(
                    sympy.sympify(row["saving_symbolic"]) + sympy.sympify(c["saving_symbolic"])
                )
        return sorted(rows.values(), key=lambda c: (-(c["saving_bytes"] or 0), c["cluster_id"]))

    def symbols(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.regions:
            for k, v in r.symbols.items():
                out.setdefault(k, v)
        return out

    @property
    def enabled(self) -> bool:
        return any(c["enabled"] for r in self.regions for c in r.clusters)

    def step_runs(self) -> list[tuple[RegionReport, tuple]]:
        """Per run of the step: its region's report at the run's own sizes, and the storages
        of its saved inputs (``StepInfo.input_keys``); each region once per run where the
        step's runs are not known."""
        s = self.step
        if s is None or not s.forward_known or len(s.input_keys) != len(s.sequence):
            return [(r, ()) for r in self.regions for _ in range(self.runs(r))]
        by_index = {r.index: r for r in self.regions}
        sizes = s.run_sizes if len(s.run_sizes) == len(s.sequence) else ((),) * len(s.sequence)
        at: dict[tuple, RegionReport] = {}
        out = []
        for index, keys, mine in zip(s.sequence, s.input_keys, sizes):
            if index in by_index:
                if (index, mine) not in at:
                    at[index, mine] = _region_at(by_index[index], dict(mine))
                out.append((at[index, mine], keys))
        return out

    def saved_bytes(self) -> tuple[int | None, int | None]:
        """Predicted activation bytes saved for backward (before, after), summed over regions."""
        runs = self.step_runs()

        def total(key: str, i: int) -> int | None:
            inputs = step_input_bytes(runs, i)  # one storage several runs save: once
            vals = [getattr(r, key) for r, _ in runs]
            if inputs is None or any(v is None for v in vals):
                return None
            return sum(vals) + inputs

        return total("baseline_saved_bytes", 0), total("final_saved_bytes", 1)

    def compiled_saved_bytes(self) -> int | None:
        """:meth:`saved_bytes`' after as Inductor compiled the plan (a saved view may be stored
        apart from its base); None where a running region has no such count (a CUDA graph, an
        offload in the graph) or symbolic sizes (the count is at the compile's sizes)."""
        after = self.saved_bytes()[1]
        if after is None:
            return None
        for r, _ in self.step_runs():
            delta = (r.extra.get("inductor") or {}).get("saved_delta")
            if delta is None or not r.final_saved_symbolic.isdigit():
                return None
            after += delta
        return after

    def frozen_plan(self) -> dict[str, Any]:
        """The plan file that re-applies this step's plan without planning again
        (``{"config": [...], "sync": {...}}``, and ``"offload_layers": k`` when the step plan
        offloaded layers compiled as their own regions; write it as JSON and pass its path as
        ``MEMOPT_CONFIG`` or ``config=``)."""
        config: list[str] = []
        syncs = []
        running = [r for r in self.regions if self.runs(r)]
        _check_one_plan_per_cluster(running)
        for r in running:
            frozen = r.extra.get("frozen") or {}
            config += [p for p in dict.fromkeys(_frozen_config(r)) if p not in config]
            if frozen.get("sync"):
                syncs.append(frozen["sync"])
        if any(s != syncs[0] for s in syncs[1:]):
            raise ValueError(
                "the compiled regions offload on different sync dicts; one plan file holds "
                "one: freeze the regions' plans separately (report.regions[i].extra['frozen'])"
            )
        out: dict[str, Any] = {"config": config, "sync": syncs[0] if syncs else {}}
        if self.step is not None and self.step.planned_offload_layers:
            out["offload_layers"] = self.step.planned_offload_layers
        return out

    def offloaded_bytes(self) -> int:
        """Activation bytes copied to host memory per step (activation offload)."""
        inside = sum(
            r.extra.get("offload", {}).get("total_bytes", 0) * self.runs(r) for r in self.regions
        )
        return inside + (self.step.offloaded_bytes if self.step is not None else 0)

    def to_dict(self) -> dict[str, Any]:
        before, after = self.saved_bytes()
        return {
            "enabled": self.enabled,
            "level": self.config.level,
            "config": self.config.plan_strings(),
            "probe_level": self.config.probe_level,
            "sources": dict(self.config.sources),
            "symbols": self.symbols(),
            "sizes_from": self.sizes_from,
            "plans": [
                {
                    k: c[k]
                    for k in (
                        "cluster_id",
                        "strategy",
                        "count",
                        "freq",
                        "enabled",
                        "saving_bytes",
                        "saving_symbolic",
                        "source",
                        "available",
                    )
                }
                for c in self.clusters()
            ],
            "saved_bytes_before": before,
            "saved_bytes_after": after,
            "offloaded_bytes": self.offloaded_bytes(),
            "regions": [r.to_dict() for r in self.regions],
            "step": self.step.to_dict() if self.step is not None else None,
            "placement": list(self.placement),
            "notes": list(self.notes),
        }

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    def table(self) -> str:
        body = self._plan_rows()
        warns = [f"Warning: {w}" for r in self.regions for w in r.warnings]
        warns += [f"Warning: {n}" for n in (self.step.notes if self.step else ())]
        warns += [f"Warning: {n}" for n in self.notes]
        return "\n".join([*self._heading(), body, *self._notes(), *warns, *self._sections()])

    def _heading(self) -> list[str]:
        cfg, src = self.config, self.config.sources
        return [
            f"Memory Optimizer : {'ON' if self.enabled else 'OFF'} : Level {cfg.level}, "
            f"User config: {_config_text(cfg)}, probe level: {cfg.probe_level}",
            f"  (settings from: level={src.get('level', 'default')}, "
            f"config={src.get('plans', 'default')}, probe_level={src.get('probe_level', 'default')})",
        ]

    def _plan_rows(self) -> str:
        from memopt.format import pretty_expr, shorten_ids

        clusters = self.clusters()
        short, _ = shorten_ids([c["cluster_id"] for c in clusters], width=ID_WIDTH)
        rows = []
        for i, c in enumerate(clusters, 1):
            count = c["count"] if c["enabled"] else -1
            rows.append(
                [
                    f"- Plan {i} : {'ON ' if c['enabled'] else 'OFF'} : "
                    f"{short[c['cluster_id']]}:{c['strategy']}:{count}",
                    c["freq"],
                    "?" if c["saving_bytes"] is None else f"{c['saving_bytes']:,}",
                    pretty_expr(c["saving_symbolic"]),
                ]
            )
        if not rows:
            return "  (no recomputable activations found)"
        return tabulate(
            rows,
            headers=["Configs", "Freq", "Max Saving(Bytes)", "Saving Symbolic(Bytes)"],
            tablefmt="simple",
            disable_numparse=True,
        )

    def _notes(self) -> list[str]:
        before, after = self.saved_bytes()
        fused = any((r.extra.get("fused_loss") or {}).get("losses") for r in self.regions)
        fused = "'s plans (the loss fused: it holds no logits)" if fused else ""
        syms = ", ".join(f"{k}={v}" for k, v in sorted(self.symbols().items()))
        syms = f"{syms} (sizes of {self.sizes_from})" if syms else "static shapes"
        notes = [
            "Note 1: enable a plan with MEMOPT_CONFIG=<ClusterId>:<Strategy>:<Count> (comma-"
            "separated for several) or memopt.optimize(model, config=[...]); level=1 enables every "
            "strategy-1 plan, level=2 also the strategy-2 (compromise) plans.",
            f"Note 2: saving values use these symbol values: {syms}.",
            f"Note 3: activation bytes saved for backward: {fmt_bytes(before)} without memopt"
            f"{fused}, {fmt_bytes(after)} with this plan ({self._regions_text()})"
            + (
                f", of which {fmt_bytes(self.offloaded_bytes())} are offloaded to host memory."
                if self.offloaded_bytes()
                else "."
            ),
        ]
        for extra in (self._excluded_note(), self._chained_note(), self._noted(), self._unknown()):
            if extra:
                notes.append(f"Note {len(notes) + 1}: {extra}")
        from memopt.format import shorten_ids

        _, legend = shorten_ids([c["cluster_id"] for c in self.clusters()], width=ID_WIDTH)
        if legend:
            notes.append(
                f"Note {len(notes) + 1}: shortened cluster ids (plan strings take either form):"
            )
            notes += [f"  {line}" for line in legend]
        from memopt.format import wrap_line

        return [part for note in notes for part in wrap_line(note)]

    def _regions_text(self) -> str:
        n = len(self.regions)
        if self.step is None or not self.step.forward_known or len(self.step.sequence) == n:
            return f"{n} compiled region(s)"
        return f"per step: {len(self.step.sequence)} runs of {n} compiled region(s)"

    def _excluded_note(self) -> str | None:
        excluded = [e for r in self.regions for e in r.excluded]
        if not excluded:
            return None
        total = sum(e["bytes"] or 0 for e in excluded)
        reasons: dict[str, int] = {}
        for e in excluded:
            key = e["reason"].split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
        top = "; ".join(f"{k} x{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:4])
        return (
            f"{len(excluded)} saved tensor(s) ({fmt_bytes(total)}) cannot be fully "
            f"recomputed: {top}."
        )

    def _chained_note(self) -> str | None:
        chained = [
            f"{c['cluster_id']} ({c['skipped']} of {c['freq']})"
            for c in self.clusters()
            if c.get("skipped")
        ]
        if not chained:
            return None
        return (
            "kept, because recomputing them would chain recomputes (one recompute reading "
            f"another's output): {', '.join(chained)}."
        )

    def _noted(self) -> str | None:
        noted = sorted({f"{c['cluster_id']} {c['note']}" for c in self.clusters() if c.get("note")})
        return "; ".join(noted) + "." if noted else None

    def _unknown(self) -> str | None:
        names = [
            n for r in self.regions for n in r.extra.get("planner", {}).get("unknown_sizes", ())
        ]
        if not names:
            return None
        return (
            f"{len(names)} tensor(s) have sizes that depend on data ({', '.join(names[:5])}"
            f"{', ...' if len(names) > 5 else ''}): the planner kept them and the predicted "
            "peak does not count them."
        )

    def _sections(self) -> list[str]:
        texts: dict[str, list[int]] = {}  # identical sections of several regions print once
        for r in self.regions:
            for section in r.extra.values():
                if isinstance(section, Mapping) and section.get("text"):
                    texts.setdefault(fold_kept_lines(section["text"]), []).append(r.index)
        lines = [
            text if len(self.regions) == 1 else f"[region {ranges(idx)}] {text}"
            for text, idx in texts.items()
        ]
        if self.step is not None and len(self.regions) > 1:
            lines.append(step_section(self))
        if self.placement:
            from memopt.params import format_placement

            lines.append(format_placement(self.placement))
        return lines


def _cluster_rows(result: Any, sym: SymbolTable) -> list[dict[str, Any]]:
    """One report row per cluster of the region's Plan (offloaded bytes as moved)."""
    notes_by_cluster: dict[str, str] = {}
    for c in result.candidates:
        if c.cluster_id and c.note:
            notes_by_cluster[c.cluster_id] = c.note
    off = getattr(result, "offload", None)
    offloaded_saving: dict[str, sympy.Expr] = {}
    if off is not None:
        moved = {n for t in off.offloaded for n in (t.source, *t.saved)}
        for c in result.candidates:
            if moved & {c.root, *c.members}:
                cid = c.cluster_id or saved_id(c.root)
                offloaded_saving[cid] = offloaded_saving.get(cid, sympy.Integer(0)) + c.nbytes
    clusters = []
    for d in result.plan.clusters:
        shown = d.strategy if d.enabled else d.default_strategy
        saving = d.saving if d.enabled else d.potential
        if d.strategy == Strategy.OFFLOAD:
            saving = offloaded_saving.get(d.cluster_id, sympy.Integer(0))
        clusters.append(
            {
                "cluster_id": d.cluster_id,
                "strategy": int(shown),
                "count": d.count if d.enabled else -1,
                "freq": d.freq,
                "enabled": d.enabled,
                "source": d.source,
                "available": [int(s) for s in d.available],
                "saving_bytes": sym.evaluate(saving),
                "saving_symbolic": _expr_str(saving),
                "note": notes_by_cluster.get(d.cluster_id),
                "skipped": d.skipped,
            }
        )
    return clusters


def _value(text: str, values: Mapping[str, int]) -> int | None:
    from memopt import _torch_compat as compat

    try:
        expr = sympy.sympify(text, locals=compat.sympy_locals())
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None
    return SymbolTable({}, dict(values)).evaluate(expr)


def _region_at(r: RegionReport, values: Mapping[str, int]) -> RegionReport:
    """A region's report with its byte values evaluated at ``values`` (its symbols only)."""
    mine = {k: values.get(k, v) for k, v in r.symbols.items()}
    if mine == r.symbols:
        return r
    clusters = [{**c, "saving_bytes": _value(c["saving_symbolic"], mine)} for c in r.clusters]
    excluded = [{**e, "bytes": _value(e["symbolic"], mine)} for e in r.excluded]
    return replace(
        r,
        symbols=mine,
        clusters=clusters,
        excluded=excluded,
        baseline_saved_bytes=_value(r.baseline_saved_symbolic, mine),
        final_saved_bytes=_value(r.final_saved_symbolic, mine),
        extra=_extra_at(r.extra, mine),
    )


def _extra_at(extra: dict[str, Any], values: Mapping[str, int]) -> dict[str, Any]:
    if not extra.get("saved_inputs"):
        return extra
    rows = [{**e, "bytes": _value(e["symbolic"], values)} for e in extra["saved_inputs"]]
    return {**extra, "saved_inputs": rows}


def _saved_inputs(pair: Sequence[Sequence[tuple]], sym: SymbolTable) -> list[dict[str, Any]]:
    """A region's saved activation inputs (``passes.pipeline.saved_inputs`` before and after
    the plan) as report rows, one per argument or output: its kind, dtype, bytes and where
    (before, after the plan) it is saved."""
    rows: dict[tuple[bool, int], dict[str, Any]] = {}
    for i, entries in enumerate(pair):
        for arg, kind, dtype, expr in entries:
            row = rows.setdefault((kind == OUTPUT, arg), {
                "arg": arg, "kind": kind, "dtype": dtype, "bytes": sym.evaluate(expr),
                "symbolic": _expr_str(expr), "saved": [False, False],
            })  # fmt: skip
            row["saved"][i] = True
    return [rows[k] for k in sorted(rows)]


def _times(c: Mapping[str, Any], n: int) -> dict[str, Any]:
    """A cluster row of a region that runs ``n`` times per step, as the step sees it."""
    row = dict(c)
    if n != 1:
        row["freq"] = c["freq"] * n
        row["skipped"] = c.get("skipped", 0) * n
        row["saving_bytes"] = None if c["saving_bytes"] is None else c["saving_bytes"] * n
        row["saving_symbolic"] = _expr_str(n * sympy.sympify(c["saving_symbolic"]))
    return row


def _step_plans(result: Any) -> list[str]:
    """A run's plan strings for a plan file of the step: where a Count counts over the step
    (the run applied what earlier runs left of it), the user's plan string, in every region
    that has the cluster, so the runs agree."""
    counted = [p for p in result.config.plans if p.count >= 0]
    here = {c.cluster_id for c in result.plan.clusters}

    def user(s: str) -> str:  # the user's string for an applied one (full or short id)
        return next((str(p) for p in counted if names(p.cluster_id, s.rsplit(":", 2)[0])), s)

    out = [user(s) for s in result.plan.plan_strings()]
    mine = [str(p) for p in counted if any(names(p.cluster_id, h) for h in here)]
    return out + [t for t in mine if t not in out]


def _frozen_config(r: RegionReport) -> list[str]:
    frozen = r.extra.get("frozen") or {}
    return list(frozen.get("step_config", frozen.get("config", ())))


def _check_one_plan_per_cluster(regions: Sequence[RegionReport]) -> None:
    """One plan file applies each plan string to every region: refuse to freeze a step whose
    regions plan one cluster differently (a step plan's per-run variants), naming it."""
    seen: dict[str, tuple[str, int]] = {}
    for r in regions:
        plans = {}
        for text in _frozen_config(r):
            cid, strategy, count = text.rsplit(":", 2)
            plans[cid] = f"{strategy}:{count}"
        for c in r.clusters:
            cid = c["cluster_id"]
            mine = plans.get(cid, "none")
            if cid in seen and seen[cid][0] != mine:
                raise ValueError(
                    f"cluster {cid!r} is planned {seen[cid][0]} in region {seen[cid][1]} and "
                    f"{mine} in region {r.index}: one plan file applies one plan to every "
                    "region; freeze the regions' plans separately (report.regions[i].extra['frozen'])"
                )
            seen.setdefault(cid, (mine, r.index))
