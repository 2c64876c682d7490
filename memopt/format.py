"""Readable report text: short cluster ids with a legend, readable formulas, folded rows.

Plain functions on strings, sympy expressions and dicts (no torch): the report and the CLI call
them when they print.

* :func:`shorten_ids` -- ``MatMul+Reshape+...+Add+`` (25 ops) -> ``MatMul+…+Add+#5f1c`` and a
  legend line per shortened id; the hash is of the full id, so the short form is stable across
  runs and machines. Plan strings accept the short form (:func:`short_id_matches`), so log
  lines print it too (:func:`short_plan_strings`).
* :func:`pretty_expr` -- ``CeilToInt(IntTrueDiv(seq, 32))`` -> ``ceil(seq/32)``,
  ``2*batch*seq**2`` -> ``2*batch*seq^2``.
* :func:`fold_param_rows` -- one row per parameter -> one row per layer, identical consecutive
  layers in one row (``model.layers.0-4``).
* :func:`fold_kept_lines` -- the offload section's ``kept on device: saved[i] name: reason``
  lines (one per parameter: every weight is a graph input) -> one line per reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sympy

from memopt.errors import ConfigError

ELLIPSIS = "…"


# ---- cluster ids ------------------------------------------------------------------------------
def _digest(text: str, n: int) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:n]


def _short_forms(cid: str, tag: str, width: int) -> list[str]:
    """Candidate short forms of ``cid``, most informative first; the last one is ``cid``
    cut to fit ``width`` (or at least 8 characters of it)."""
    ops = [op for op in cid.split("+") if op]
    forms = []
    if len(ops) > 1:
        forms += [f"{ops[0]}+{ELLIPSIS}+{ops[-1]}+#{tag}", f"{ops[0]}+{ELLIPSIS}+#{tag}"]
    keep = max(width - len(tag) - 2, 8)
    return [*forms, f"{cid[:keep]}{ELLIPSIS}#{tag}"]


def shorten_ids(ids: Iterable[str], width: int = 40) -> tuple[dict[str, str], list[str]]:
    """Short forms for the ids longer than ``width`` characters.

    Returns ``(mapping, legend)``: ``mapping[id]`` is the id to print (ids that fit map to
    themselves), ``legend`` one ``"short = full"`` line per shortened id, in the order given.
    A short form keeps the first and last op and a hash of the full id (4 hex digits, more if
    two ids would collide), and fits ``width`` when ``width >= 14``.
    """
    if width < 1:
        raise ConfigError(f"shorten_ids: width must be positive, got {width}")
    unique = list(dict.fromkeys(ids))
    mapping: dict[str, str] = {}
    legend: list[str] = []
    for cid in unique:
        if len(cid) <= width:
            mapping[cid] = cid
    long_ids = [c for c in unique if c not in mapping]
    for cid in long_ids:
        others = [c for c in long_ids if c != cid]
        short = _unique_short(cid, width, set(mapping.values()), others)
        mapping[cid] = short
        legend.append(f"{short} = {cid}")
    return mapping, legend


def _unique_short(cid: str, width: int, taken: set[str], others: Sequence[str]) -> str:
    """The shortest form no other id printed with it has, and that names none of them (a
    plan string may give it: :func:`short_id_matches`)."""
    for n in range(4, 41):
        forms = _short_forms(cid, _digest(cid, n), width)
        short = next((f for f in forms if len(f) <= width), forms[-1])
        if short not in taken and not any(short_id_matches(short, o) for o in others):
            return short
    raise AssertionError(f"no unique short form for {cid!r}")  # sha1 has 40 hex digits


#: A short cluster id as :func:`shorten_ids` prints it, or typed with ``...`` for the ellipsis:
#: ``head…tail#tag`` (``tag``: leading hex digits of the full id's SHA-1).
SHORT_ID_RE = re.compile(r"^(?P<head>.*?)(?:…|\.\.\.)(?P<tail>.*)#(?P<tag>[0-9a-f]{4,40})$")


def short_id_matches(short: str, full: str) -> bool:
    """Whether ``short`` (a form :func:`shorten_ids` gives, ``…`` or ``...``) names ``full``:
    the hash tag is a prefix of the full id's digest and the kept ends agree."""
    m = SHORT_ID_RE.match(short)
    if m is None:
        return False
    head, tail, tag = m["head"], m["tail"], m["tag"]
    return (
        _digest(full, len(tag)) == tag
        and full.startswith(head)
        and full.endswith(tail)
        and len(full) >= len(head) + len(tail)
    )


def short_id_suggestions(short: str, ids: Iterable[str]) -> list[str]:
    """For a short id that names none of ``ids``: those its hash tag fits (a typo in the ends
    kept), else those its ends fit (a stale tag)."""
    m = SHORT_ID_RE.match(short)
    if m is None:
        return []
    ids = sorted(set(ids))
    tagged = [i for i in ids if _digest(i, len(m["tag"])) == m["tag"]]
    return tagged or [i for i in ids if i.startswith(m["head"]) and i.endswith(m["tail"])]


def short_plan_strings(plans: Iterable[str], width: int = 40) -> list[str]:
    """``ClusterId:Strategy:Count`` strings with long ids in their short form, for log lines:
    plan strings accept the short form (:func:`memopt.plan.expand_short_ids`)."""
    plans = list(plans)
    split = [p.rsplit(":", 2) for p in plans]
    mapping, _ = shorten_ids([s[0] for s in split if len(s) == 3], width=width)
    return [
        ":".join([mapping.get(s[0], s[0]), *s[1:]]) if len(s) == 3 else p
        for p, s in zip(plans, split, strict=True)
    ]


# ---- formulas -----------------------------------------------------------------------------------
# precedence of the printed form: higher binds tighter
_ADD, _MUL, _POW, _ATOM = 1, 2, 3, 4

_CALLS = {
    "CeilToInt": "ceil",
    "ceiling": "ceil",
    "FloorToInt": "floor",
    "floor": "floor",
    "TruncToInt": "trunc",
    "RoundToInt": "round",
    "Max": "max",
    "Min": "min",
    "Abs": "abs",
}
_DIVS = {"IntTrueDiv": "/", "FloatTrueDiv": "/", "CleanDiv": "/", "FloorDiv": "//"}
_TRANSPARENT = {"ToFloat", "Identity", "TruncToFloat"}


def pretty_expr(expr: sympy.Expr | str | int) -> str:
    """A formula as a person writes it: ``ceil(seq/32)``, ``2*batch*seq^2 + 64*seq``,
    ``batch//4``, ``x % 8``; torch's sympy functions are recognised by name, so expressions
    parsed back from report JSON (strings) print the same."""
    if isinstance(expr, str):
        expr = sympy.sympify(expr)
    return _pr(sympy.sympify(expr))[0]


def _wrap(part: tuple[str, int], level: int) -> str:
    text, prec = part
    return f"({text})" if prec < level else text


def _pr(e: Any) -> tuple[str, int]:
    name = type(e).__name__
    if e.is_Symbol or e.is_Integer:
        return (str(e), _ATOM) if not (e.is_Integer and e < 0) else (str(e), _ADD)
    if e.is_Rational:
        return f"{e.p}/{e.q}", _MUL
    if e.is_Number:
        return str(e), _ATOM
    if e.is_Add:
        return _pr_add(e), _ADD
    if e.is_Mul:
        return _pr_mul(e)
    if e.is_Pow:
        return _pr_pow(e)
    args = e.args
    if name in _TRANSPARENT and len(args) == 1:
        return _pr(args[0])
    if name in _DIVS and len(args) == 2:
        return f"{_wrap(_pr(args[0]), _MUL)}{_DIVS[name]}{_wrap(_pr(args[1]), _POW)}", _MUL
    if name in ("Mod", "PythonMod") and len(args) == 2:
        return f"{_wrap(_pr(args[0]), _POW)} % {_wrap(_pr(args[1]), _POW)}", _MUL
    if name in ("PowByNatural", "FloatPow") and len(args) == 2:
        return f"{_wrap(_pr(args[0]), _ATOM)}^{_wrap(_pr(args[1]), _ATOM)}", _POW
    call = _CALLS.get(name, name)
    return f"{call}({', '.join(_pr(a)[0] for a in args)})", _ATOM


def _pr_add(e: sympy.Add) -> str:
    out = ""
    for i, term in enumerate(e.as_ordered_terms()):
        coeff, rest = term.as_coeff_Mul()
        negative = coeff.is_Number and coeff < 0
        text = _wrap(_pr(-term if negative else term), _ADD + 1)
        if i == 0:
            out = f"-{text}" if negative else text
        else:
            out += f" - {text}" if negative else f" + {text}"
    return out


def _pr_mul(e: sympy.Mul) -> tuple[str, int]:
    coeff, rest = e.as_coeff_Mul()
    if coeff.is_Number and coeff < 0:
        return "-" + _wrap(_pr(-e), _MUL), _ADD
    num, den = [], []
    for f in sympy.Mul.make_args(e):
        if f.is_Pow and f.exp.is_Number and f.exp < 0:
            den.append(f.base if f.exp == -1 else sympy.Pow(f.base, -f.exp))
        elif f.is_Rational and not f.is_Integer:
            if f.p != 1:
                num.append(sympy.Integer(f.p))
            den.append(sympy.Integer(f.q))
        else:
            num.append(f)
    top = "*".join(_wrap(_pr(f), _MUL) for f in num) or "1"
    if not den:
        return top, _MUL
    bottom = "*".join(_wrap(_pr(f), _MUL) for f in den)
    bottom = bottom if len(den) == 1 and _pr(den[0])[1] >= _POW else f"({bottom})"
    return f"{top}/{bottom}", _MUL


def _pr_pow(e: sympy.Pow) -> tuple[str, int]:
    base, exp = e.args
    if exp.is_Number and exp < 0:
        return f"1/{_wrap(_pr(sympy.Pow(base, -exp)), _POW)}", _MUL
    if exp == sympy.Rational(1, 2):
        return f"sqrt({_pr(base)[0]})", _ATOM
    return f"{_wrap(_pr(base), _ATOM)}^{_wrap(_pr(exp), _ATOM)}", _POW


# ---- parameter rows -----------------------------------------------------------------------------
_LAYER = re.compile(r"^(.*?\.\d+)(?:\.|$)")


def _group(name: str) -> str | None:
    """``model.layers.3.mlp.up.weight`` -> ``model.layers.3``; None outside repeated layers."""
    m = _LAYER.match(name)
    return m.group(1) if m else None


def fold_param_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fold per-parameter rows ``{name, param_bytes, where, ...}`` into per-layer rows.

    Parameters whose name has a numeric component (``model.layers.3.attn.q.weight``) are
    summed per layer (``model.layers.3``) and placement (``where``); consecutive layers with
    the same parameter count, bytes and placement fold into one row (``model.layers.0-4``).
    The other parameters fold into one ``other parameters`` row per placement. Each output row
    is ``{name, layers, params, param_bytes, where}``: ``layers`` layers of ``params``
    parameters and ``param_bytes`` bytes each (``layers`` 0 for the other parameters).
    Order: first appearance.
    """
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        try:
            name, nbytes, where = str(r["name"]), int(r["param_bytes"]), str(r["where"])
        except KeyError as e:
            raise ConfigError(f"fold_param_rows: a row lacks {e.args[0]!r}: {dict(r)}") from None
        layer = _group(name)
        key = (layer or "", where)
        g = groups.setdefault(key, {"layer": layer, "params": 0, "param_bytes": 0, "where": where})
        g["params"] += 1
        g["param_bytes"] += nbytes
    out: list[dict[str, Any]] = []
    for g in groups.values():
        if g["layer"] is None:
            out.append(_row("other parameters", 0, g))
            continue
        prev = out[-1] if out else None
        if prev is not None and prev.get("_prefix") is not None and _extends(prev, g):
            prev["layers"] += 1
            prev["_last"] = _index(g["layer"])
            prev["name"] = f"{prev['_prefix']}.{prev['_first']}-{prev['_last']}"
            continue
        row = _row(g["layer"], 1, g)
        prefix, _, idx = g["layer"].rpartition(".")
        row.update(_prefix=prefix, _first=int(idx), _last=int(idx))
        out.append(row)
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in out]


def _row(name: str, layers: int, g: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "layers": layers,
        "params": g["params"],
        "param_bytes": g["param_bytes"],
        "where": g["where"],
    }


def _index(layer: str) -> int:
    return int(layer.rpartition(".")[2])


def _extends(prev: Mapping[str, Any], g: Mapping[str, Any]) -> bool:
    prefix, _, idx = g["layer"].rpartition(".")
    return (
        prefix == prev["_prefix"]
        and int(idx) == prev["_last"] + 1
        and (g["params"], g["param_bytes"], g["where"])
        == (prev["params"], prev["param_bytes"], prev["where"])
    )


def format_param_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """:func:`fold_param_rows` as a fixed-width table (MiB per layer)."""
    lines = [f"{'parameters':<32} {'layers':>6} {'params':>6} {'MiB each':>10}  where"]
    for r in fold_param_rows(rows):
        layers = str(r["layers"]) if r["layers"] else "-"
        mib = r["param_bytes"] / 2**20
        lines.append(f"{r['name']:<32} {layers:>6} {r['params']:>6} {mib:>10.2f}  {r['where']}")
    return "\n".join(lines)


# ---- the offload section's kept tensors ------------------------------------------------------
_KEPT = re.compile(r"^kept on device: saved\[(\d+)\] (\S+): (.*)$")
_SMALL = re.compile(r"^\d+ bytes < (min_bytes=\d+)$")


def fold_kept_lines(text: str) -> str:
    """Fold ``kept on device: saved[i] name: reason`` lines of a report section into one line
    per reason (``N bytes < min_bytes=M`` counts as one reason, ``under min_bytes=M``), at the
    place of the reason's first line::

        kept on device: 75 saved tensors, a graph input: saved[0-74] (primals_1 ... primals_77)

    A reason held by one tensor keeps its line. Other lines are left as they are."""
    lines = text.split("\n")
    groups: dict[str, list[tuple[int, str]]] = {}
    order: list[str | int] = []  # a reason (its folded line goes here) or a kept line's index
    for i, line in enumerate(lines):
        m = _KEPT.match(line)
        if m is None:
            order.append(i)
            continue
        small = _SMALL.match(m.group(3))
        reason = f"under {small.group(1)}" if small else m.group(3)
        if reason not in groups:
            order.append(reason)
        groups.setdefault(reason, []).append((int(m.group(1)), m.group(2)))
    out = []
    for item in order:
        if isinstance(item, int):
            out.append(lines[item])
            continue
        kept = groups[item]
        if len(kept) == 1:
            out.append(f"kept on device: saved[{kept[0][0]}] {kept[0][1]}: {item}")
            continue
        names = (
            f"{kept[0][1]} ... {kept[-1][1]}" if len(kept) > 2 else ", ".join(n for _, n in kept)
        )
        idx = ranges(i for i, _ in kept)
        out.append(f"kept on device: {len(kept)} saved tensors, {item}: saved[{idx}] ({names})")
    return "\n".join(out)


def ranges(indices: Iterable[int]) -> str:
    """``0, 1, 2, 5`` -> ``"0-2,5"`` (run positions, regions, saved-tensor indices)."""
    out: list[str] = []
    for i in sorted(set(indices)):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


#: Text lines of reports and planner summaries are wrapped to this many columns.
TEXT_WIDTH = 120


def wrap_line(line: str, width: int = TEXT_WIDTH) -> list[str]:
    """``line`` wrapped at spaces to ``width`` columns, continuation lines indented under the
    text after a leading label (``"Note 4: "``, ``"plan: "``); a word longer than the width
    stays whole (an id is never split)."""
    import textwrap

    if len(line) <= width:
        return [line]
    m = re.match(r"(\s*(?:Note \d+: |[a-z][\w ()]*: )?)", line)
    lead = " " * min(len(m.group(1)) if m else 0, 24)
    return textwrap.wrap(
        line,
        width=width,
        subsequent_indent=lead,
        break_long_words=False,
        break_on_hyphens=False,
    )
