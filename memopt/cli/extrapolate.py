"""Rename, re-evaluate and depth-extrapolate traced results (plain data, no FX).

**Depth.** Tracing cost grows with the number of layers. A model whose depth is a config
field is traced at two small depths ``k`` and ``k + 1`` (2 and 3 by default) and every
quantity ``q`` -- a cluster's frequency and saving, the saved bytes, each part of each phase
peak -- is extended to ``n`` layers as ``q(n) = q(k+1) + (n - k - 1) * (q(k+1) - q(k))``. That
is exact when each added layer adds the same thing, which holds for stacks of identical layers
(the recompute-chain bound keeps a fixed number of clusters per layer boundary). Phase peaks
are not extrapolated that way (their op may move): the deeper trace's peaks get the per-layer
saved bytes or gradients added, as :mod:`memopt.cli.liveness` explains. ``--depth full``
traces every layer instead, and the tests compare both on small models.

**Names and values.** Shape symbols are renamed to ``batch`` and ``seq``, and every value is
re-evaluated at the sizes asked for (the trace may use others: a size of 1 would be
specialized, equal batch and seq would share one symbol).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import sympy

from memopt import _torch_compat as compat
from memopt.cli.liveness import PhasePeak, StepProfile, phase_of
from memopt.report import RegionReport

_EXCLUDED_KEY = ("reason", "symbolic", "shape", "dtype", "compromise")


def parse_expr(text: str) -> sympy.Expr:
    """A printed size expression back to sympy (torch's ``CeilToInt`` etc. included)."""
    return sympy.sympify(text, locals=compat.sympy_locals())


def _subs_map(mapping: Mapping[str, Any]) -> dict[sympy.Symbol, Any]:
    """Substitutions for both the plain symbols of parsed text and the shape-env ones."""
    out: dict[sympy.Symbol, Any] = {}
    for name, v in mapping.items():
        new = _named(v) if isinstance(v, str) else v
        out[sympy.Symbol(name)] = new
        out[sympy.Symbol(name, integer=True, positive=True)] = new
    return out


def _named(name: str) -> sympy.Expr:
    """A readable name's expression: ``batch``, ``seq`` or a product of them and a number
    (``batch*seq``, ``16*batch``: the tokens of a flattened batch, a later region's input
    across a graph break)."""
    return sympy.Mul(
        *(
            sympy.Integer(p) if p.isdigit() else sympy.Symbol(p, integer=True, positive=True)
            for p in name.split("*")
        )
    )


def rename_expr(e: sympy.Expr, names: Mapping[str, str]) -> sympy.Expr:
    return sympy.expand(sympy.sympify(e).xreplace(_subs_map(names))) if names else e


def evaluate(e: sympy.Expr | str, values: Mapping[str, int]) -> int | None:
    """Integer value of ``e`` at ``values`` (None if a symbol is left)."""
    expr = parse_expr(e) if isinstance(e, str) else sympy.sympify(e)
    v = sympy.sympify(expr.xreplace(_subs_map(dict(values))))
    return int(v) if v.is_number else None


def _text(e: sympy.Expr) -> str:
    return str(sympy.expand(e))


def _affine(small: sympy.Expr, large: sympy.Expr, steps: int) -> sympy.Expr:
    return sympy.expand(large + steps * (large - small))


# --------------------------------------------------------------------------- region reports


def finish_region(
    region: RegionReport, names: Mapping[str, str], values: Mapping[str, int]
) -> RegionReport:
    """``region`` with symbols renamed (``names``) and every byte value taken at ``values``."""

    def conv(text: str) -> tuple[str, int | None]:
        e = rename_expr(parse_expr(text), names)
        return _text(e), evaluate(e, values)

    clusters = []
    for c in region.clusters:
        sym, val = conv(c["saving_symbolic"])
        clusters.append({**c, "saving_symbolic": sym, "saving_bytes": val})
    excluded = []
    for x in region.excluded:
        sym, val = conv(x["symbolic"])
        excluded.append({**x, "symbolic": sym, "bytes": val})
    base_sym, base_val = conv(region.baseline_saved_symbolic)
    final_sym, final_val = conv(region.final_saved_symbolic)
    symbols: dict[str, int] = {}
    for k, v in region.symbols.items():  # a symbol named as a product gives its factors
        name = names.get(k, k)
        if "*" not in name:
            symbols[name] = v
        else:
            parts = [p for p in name.split("*") if not p.isdigit()]
            symbols.update({p: values[p] for p in parts if p in values})
    symbols.update({k: v for k, v in values.items() if k in symbols})
    extra = region.extra
    if extra.get("saved_inputs"):
        rows = []
        for e in extra["saved_inputs"]:
            sym, val = conv(e["symbolic"])
            rows.append({**e, "symbolic": sym, "bytes": val})
        extra = {**extra, "saved_inputs": rows}
    return replace(
        region,
        extra=extra,
        clusters=clusters,
        excluded=excluded,
        baseline_saved_symbolic=base_sym,
        baseline_saved_bytes=base_val,
        final_saved_symbolic=final_sym,
        final_saved_bytes=final_val,
        symbols=symbols,
    )


def extrapolate_region(
    small: RegionReport, large: RegionReport, steps: int, values: Mapping[str, int]
) -> RegionReport:
    """The region ``steps`` layers deeper than ``large`` (``small`` has one layer fewer)."""
    rows_s = {c["cluster_id"]: c for c in small.clusters}
    clusters = []
    for c in large.clusters:
        s = rows_s.get(c["cluster_id"])
        freq_s = s["freq"] if s else 0
        skip_s = s.get("skipped", 0) if s else 0
        sav_s = parse_expr(s["saving_symbolic"]) if s else sympy.Integer(0)
        freq = c["freq"] + steps * (c["freq"] - freq_s)
        if freq <= 0:
            continue
        saving = _affine(sav_s, parse_expr(c["saving_symbolic"]), steps)
        clusters.append(
            {
                **c,
                "freq": freq,
                "skipped": max(0, c.get("skipped", 0) + steps * (c.get("skipped", 0) - skip_s)),
                "saving_symbolic": _text(saving),
                "saving_bytes": evaluate(saving, values),
            }
        )
    excluded = _extrapolate_excluded(small.excluded, large.excluded, steps)
    base = _affine(
        parse_expr(small.baseline_saved_symbolic), parse_expr(large.baseline_saved_symbolic), steps
    )
    final = _affine(
        parse_expr(small.final_saved_symbolic), parse_expr(large.final_saved_symbolic), steps
    )
    return replace(
        large,
        clusters=clusters,
        excluded=excluded,
        baseline_saved_symbolic=_text(base),
        baseline_saved_bytes=evaluate(base, values),
        final_saved_symbolic=_text(final),
        final_saved_bytes=evaluate(final, values),
        extra={k: v for k, v in large.extra.items() if k != "planner"},
    )


def _extrapolate_excluded(
    small: Sequence[dict[str, Any]], large: Sequence[dict[str, Any]], steps: int
) -> list[dict[str, Any]]:
    def key(x: dict[str, Any]) -> tuple:
        return tuple(x.get(k) for k in _EXCLUDED_KEY)

    count_s = Counter(key(x) for x in small)
    count_l = Counter(key(x) for x in large)
    first = {}
    for x in large:
        first.setdefault(key(x), x)
    out = []
    for k, x in first.items():
        n = count_l[k] + steps * (count_l[k] - count_s.get(k, 0))
        out.extend(dict(x) for _ in range(max(0, n)))
    return out


# --------------------------------------------------------------------------- profiles


def rename_profile(profile: StepProfile, names: Mapping[str, str]) -> StepProfile:
    def ph(p: PhasePeak) -> PhasePeak:
        return PhasePeak(**{k: rename_expr(v, names) for k, v in p.parts().items()})

    return StepProfile(
        phases={k: ph(v) for k, v in profile.phases.items()},
        saved=rename_expr(profile.saved, names),
        gradients=rename_expr(profile.gradients, names),
        inputs=rename_expr(profile.inputs, names),
    )


def extrapolate_profile(small: StepProfile, large: StepProfile, steps: int) -> StepProfile:
    """``large`` with ``steps`` more layers: each added layer adds the per-layer saved bytes
    (``large.saved - small.saved``) to the forward and backward-start peaks and the per-layer
    gradient bytes to the backward-end peak (see :mod:`memopt.cli.liveness`)."""
    per_saved = sympy.expand(large.saved - small.saved)
    per_grads = sympy.expand(large.gradients - small.gradients)
    phases = {}
    for name, p in large.phases.items():
        parts = p.parts()
        if phase_of(name) == "backward_end":
            parts["gradients"] = sympy.expand(parts["gradients"] + steps * per_grads)
        else:
            parts["activations"] = sympy.expand(parts["activations"] + steps * per_saved)
        phases[name] = PhasePeak(**parts)
    return StepProfile(
        phases=phases,
        saved=_affine(small.saved, large.saved, steps),
        gradients=_affine(small.gradients, large.gradients, steps),
        inputs=large.inputs,
    )
