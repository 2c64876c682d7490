"""Prose numbers of docs/benchmarks.md's older sections (sixth session and before, the
parameter-offload floor), registered in benchmarks/docs_prose.py's VALUES."""

from __future__ import annotations

import re
import statistics  # noqa: F401 -- some values take medians
from pathlib import Path  # noqa: F401

from benchmarks.docs_fmt import GiB, gib, pct, size  # noqa: F401
from benchmarks.docs_prose_base import DATA, FILES, PEER_RUNS, load  # noqa: F401
from benchmarks.docs_prose_core import _peer, _range  # noqa: F401


def _trials(name: str, variant: str) -> dict[int, dict]:
    return {t["batch"]: t for t in load(name)["variants"][variant]["trials"]}


def lbatch(name: str, variant: str, what: str, *args: str) -> str:
    """``largest_batch.py``, from the trials: ``best`` (the largest batch that trained),
    ``oom`` (the batches that ran out of memory, ascending, "a, b and c"), ``tps:BATCH``
    (tokens/s), ``share:BATCH`` (those tokens/s over torch.compile's at its largest batch, %,
    1 decimal), ``peak:BATCH`` / ``maxpeak`` (GiB, 2 decimals), ``times`` (the best batch over
    torch.compile's, 2 decimals), ``req:BATCH`` (the request that ran out of memory, GiB)."""
    tr = _trials(name, variant)
    best = max(b for b, t in tr.items() if t["ok"])

    def compile_best() -> dict:
        comp = _trials(name, "compile")
        return comp[max(b for b, t in comp.items() if t["ok"])]

    if what == "best":
        return str(best)
    if what == "oom":
        bad = [str(b) for b in sorted(tr) if not tr[b]["ok"]]
        return bad[0] if len(bad) == 1 else ", ".join(bad[:-1]) + " and " + bad[-1]
    if what == "tps":
        return f"{tr[int(args[0])]['tokens_per_s']:,.0f}"
    if what == "share":
        t = tr[int(args[0])]
        return f"{100 * t['tokens_per_s'] / compile_best()['tokens_per_s']:.1f}%"
    if what == "peak":
        return gib(tr[int(args[0])]["peak"])
    if what == "maxpeak":
        return gib(max(t["peak"] for t in tr.values() if t["ok"]))
    if what == "times":
        return f"{best / compile_best()['batch']:.2f}"
    if what == "req":  # the allocation an out-of-memory trial asked for, GiB
        m = re.search(r"Tried to allocate ([\d.]+) GiB", tr[int(args[0])]["error"])
        if m is None:
            raise KeyError(f"batch {args[0]}: no request size in the error")
        return m.group(1)
    raise KeyError(f"no lbatch value {what!r} (see docs_prose.lbatch)")


def lbatch_meta(name: str, field: str) -> str:
    """``largest_batch.py``'s settings: ``cap`` / ``margin`` (GiB, as given), ``states`` (AdamW
    states, GiB, 2 decimals), ``budget`` (memopt's budget, GiB, 2 decimals)."""
    d = load(name)
    out = {
        "cap": lambda: f"{d['settings']['cap_gib']:g}",
        "margin": lambda: f"{d['settings']['margin_gib']:g}",
        "states": lambda: gib(d["meta"]["optimizer_state_bytes"]),
        "budget": lambda: gib(d["meta"]["memopt_budget_bytes"]),
    }
    return out[field]()


def freeze(what: str) -> str:
    """``freeze_check.py``: ``ms:planned`` / ``ms:frozen`` (step ms, 1 decimal), ``peak``
    (bytes, thousands separators), ``movedMiB``, ``nplans`` (plan strings), ``nsaved`` (of them
    offload plans, ``Saved_*``), ``layers`` (the sync dict's layers, "a-b")."""
    d = load("freeze")
    plan = d["plan"]
    out = {
        "peak": lambda: f"{d['planned']['peak']:,}",
        "movedMiB": lambda: f"{d['planned']['offloaded_bytes'] / (1 << 20):.0f}",
        "nplans": lambda: str(len(plan["config"])),
        "nsaved": lambda: str(sum(c.startswith("Saved_") for c in plan["config"])),
        "layers": lambda: f"{min(map(int, plan['sync']))}-{max(map(int, plan['sync']))}",
    }
    if what not in out:
        raise KeyError(f"no freeze value {what!r} (see docs_prose.freeze)")
    for key in ("planned", "frozen"):
        if d[key]["peak"] != d["planned"]["peak"]:
            raise KeyError("freeze_check: planned and frozen peaks differ")
    return out[what]()


def freeze_ms(which: str) -> str:
    """``freeze_check.py``: step ms of the ``planned`` or ``frozen`` run, 1 decimal."""
    return f"{load('freeze')[which]['ms']:.1f}"


def plantime(name: str, variant: str, what: str) -> str:
    """``plan_time.py`` row ``variant``: ``compile`` (s, 1 decimal), ``planner`` / ``build`` /
    ``solve`` (the budget planner's timers, s, 2 decimals), ``share`` (the planner's time over
    torch.compile's compile time, %, 1 decimal)."""
    rows = {r["variant"]: r for r in load(name)["rows"]}
    r = rows[variant]
    t = r.get("timers", {})
    if what == "compile":
        return f"{r['compile_s']:.1f}"
    if what in ("planner", "build", "solve"):
        key = {"planner": "plan_budget", "build": "plan_budget.build_problem"}.get(
            what, "plan_budget.solve"
        )
        return f"{t[key]:.2f}"
    if what == "share":
        return f"{100 * t['plan_budget'] / rows['compile']['compile_s']:.1f}%"
    raise KeyError(f"no plantime value {what!r} (see docs_prose.plantime)")


def offbase(name: str, what: str) -> str:
    """``offload.py``'s baseline and rates: ``d2h`` / ``h2d`` (pinned memcpy GB/s, 1 decimal),
    ``ms`` / ``fwd`` (the step without offload / its forward, ms, 1 decimal), ``peak`` (GiB),
    ``budget`` (D2H bandwidth x forward time, GiB or MiB; ``budgetMiB``: MiB, 1 decimal)."""
    d = load(name)
    base = next(r for r in d["rows"] if r["k"] == 0)
    if what in ("d2h", "h2d"):
        return f"{d['bandwidth'][what]:.1f}"
    if what == "ms":
        return f"{base['step_ms']:.1f}"
    if what == "fwd":
        return f"{base['fwd_ms']:.1f}"
    if what == "peak":
        return gib(base["peak_bytes"])
    if what == "budget":
        return size(d["bandwidth"]["d2h"] * 1e9 * base["fwd_ms"] / 1e3)
    if what == "budgetMiB":
        return f"{d['bandwidth']['d2h'] * 1e9 * base['fwd_ms'] / 1e3 / (1 << 20):.1f} MiB"
    raise KeyError(f"no offbase value {what!r} (see docs_prose.offbase)")


def offrow(name: str, k: str, what: str, sync: str = "default") -> str:
    """An ``offload.py`` row at ``k`` (and ``sync``): ``over`` (step time over the baseline's,
    %, 1 decimal, signed), ``peak`` (GiB), ``drop`` (the peak's drop over the bytes offloaded),
    ``d2hpct`` (D2H rate of the memcpy rate), ``overlap`` / ``h2doverlap`` (copy time overlapped
    with kernels), ``share`` (offloaded bytes of the forward budget), ``size``, ``maxdiff``
    (largest gradient difference), ``ms`` / ``fwd`` (step / forward ms)."""
    rows = load(name)["rows"]
    base = next(r for r in rows if r["k"] == 0)
    r = next(r for r in rows if r["k"] == int(k) and r.get("sync", "default") == sync)
    if what == "over":
        return pct(r["step_ms"], base["step_ms"])
    if what == "peak":
        return gib(r["peak_bytes"])
    return _offfield(load(name), base, r, what)


def _offfield(d: dict, base: dict, r: dict, what: str) -> str:
    tr = r.get("trace", {})
    budget = d["bandwidth"]["d2h"] * 1e9 * base["fwd_ms"] / 1e3
    out = {
        "drop": lambda: f"{(base['peak_bytes'] - r['peak_bytes']) / r['offloaded_bytes']:.2f}",
        "d2hpct": lambda: f"{100 * tr['d2h']['gbps'] / d['bandwidth']['d2h']:.0f}%",
        "overlap": lambda: f"{100 * tr['d2h']['overlap']:.0f}%",
        "h2doverlap": lambda: f"{100 * tr['h2d']['overlap']:.0f}%",
        "share": lambda: f"{100 * r['offloaded_bytes'] / budget:.0f}%",
        "size": lambda: size(r["offloaded_bytes"]),
        "maxdiff": lambda: f"{r['grads_max_abs_diff']:.2e}".replace("e-0", "e-"),
        "ms": lambda: f"{r['step_ms']:.1f}",
        "fwd": lambda: f"{r['fwd_ms']:.1f}",
    }
    if what not in out:
        raise KeyError(f"no offrow value {what!r} (see docs_prose.offrow)")
    return out[what]()


def offspan(name: str, what: str, sel: str = "all") -> str:
    """:func:`offrow`'s ``what`` over the offloaded rows of ``name``, lowest–highest: ``sel``
    ``all``, ``late`` (the late dict's rows) or ``+``-joined k of the default dict."""
    d = load(name)
    base = next(r for r in d["rows"] if r["k"] == 0)
    rows = [r for r in d["rows"] if r["k"]]
    if sel == "late":
        rows = [r for r in rows if r.get("sync") == "late"]
    elif sel != "all":
        ks = {int(k) for k in sel.split("+")}
        rows = [r for r in rows if r["k"] in ks and r.get("sync", "default") == "default"]
    if what == "over":
        vals = [pct(r["step_ms"], base["step_ms"]) for r in rows]
    else:
        vals = [_offfield(d, base, r, what) for r in rows]
    unit = "%" if vals[0].endswith("%") else ""
    nums = sorted(float(v.rstrip("%")) for v in vals)
    signed = vals[0].startswith(("+", "-"))
    fmt = "{:+." if signed else "{:."
    nd = len(vals[0].rstrip("%").split(".")[1]) if "." in vals[0] else 0
    texts = [(fmt + f"{nd}f}}").format(x) for x in nums]
    return _range(texts, "offspan", "–") + unit


def copy_at(work: str, direction: str, chunk: str) -> str:
    """``copy_interference.py`` at one chunk size (MiB): how much slower workload ``work``
    (as in :func:`copies`) ran under ``direction`` copies, signed %, 1 decimal."""
    what = {"llama": "llama step", "hbm": "hbm copy", "matmul": "matmul"}[work]
    r = next(
        r for r in load("copies")["rows"] if r["what"] == what and r["chunk_mib"] == int(chunk)
    )
    return f"{100 * r[direction]['slowdown']:+.1f}%"


POINTS = ("0.8", "0.5", "0.3", "0.1")


def _pareto_point(name: str, point: str) -> tuple[dict, dict, dict]:
    """torch.compile's row, torch's budget row and memopt's row at torch's peak."""
    v = {r["variant"]: r for r in load(name)["rows"]}
    m = next(r for k, r in v.items() if k.endswith(f"(torch {point})"))
    return v["torch.compile"], v[f"torch.compile budget={point}"], m


def _source_compile(row: dict, base: dict) -> dict:
    """torch.compile's row of the run ``row`` was reused from, else ``base``."""
    if not row.get("reused"):
        return base
    src = Path(row["reused"]).name
    return next(r for r in load(src)["rows"] if r["variant"] == "torch.compile")


def pareto_pt(name: str, point: str, field: str) -> str:
    """A ``pareto.py`` budget point (``0.8`` ...; ``-`` for ``compms``): ``mover`` / ``tover``
    (memopt's / torch's step time over torch.compile's, signed %, 1 decimal), ``half`` (half of
    torch's), ``mms`` / ``hms`` (memopt's overhead / half of torch's, ms, 2 decimals), ``pred``
    (the planner's predicted overhead, ms, 2 decimals), ``compms`` (torch.compile's step, ms, 1
    decimal), ``halfsrc`` (half of torch's overhead against the torch.compile of the run its row
    was reused from, ``--reuse``), ``peakdiff`` / ``peakpct`` (memopt's peak against torch's,
    GiB / %, unsigned), ``belowMiB`` (torch's peak minus memopt's, MiB), ``movedGiB`` (bytes the
    plan offloads), ``excessms`` (measured overhead above the predicted one, ms, 1 decimal)."""
    base, t, m = _pareto_point(name, point if point != "-" else POINTS[0])
    out = {
        "mover": lambda: pct(m["ms"], base["ms"]),
        "tover": lambda: pct(t["ms"], base["ms"]),
        "half": lambda: f"{50 * (t['ms'] / base['ms'] - 1):+.1f}%",
        "halfsrc": lambda: f"{50 * (t['ms'] / _source_compile(t, base)['ms'] - 1):+.1f}%",
        "mms": lambda: f"{m['ms'] - base['ms']:.2f}",
        "hms": lambda: f"{(t['ms'] - base['ms']) / 2:.2f}",
        "pred": lambda: f"{1e3 * m['planner'][0]['predicted_overhead_s']:.2f}",
        "compms": lambda: f"{base['ms']:.1f}",
        "peakdiff": lambda: gib(abs(m["peak"] - t["peak"])),
        "peakpct": lambda: f"{abs(100 * (m['peak'] / t['peak'] - 1)):.1f}%",
        "belowMiB": lambda: f"{(t['peak'] - m['peak']) / (1 << 20):.0f}",
        "movedGiB": lambda: gib(m["planner"][0]["saved_bytes_offloaded"]),
        "excessms": lambda: (
            f"{m['ms'] - base['ms'] - 1e3 * m['planner'][0]['predicted_overhead_s']:.1f}"
        ),
    }
    if field not in out:
        raise KeyError(f"no pareto_pt field {field!r} (see docs_prose.pareto_pt)")
    return out[field]()


def pareto_all(name: str, field: str) -> str:
    """:func:`pareto_pt`'s ``field`` at the four budget points, joined with ``/``."""
    return "/".join(pareto_pt(name, p, field).rstrip("%") for p in POINTS)


def pareto_pred(name: str, how: str = "range") -> str:
    """The planner's predicted peaks against memopt's measured ones at the budget points, as
    the tables show them (predicted / measured - 1, %, 1 decimal): ``range`` (signed, lowest to
    highest), ``under`` (all below: the distances, unsigned, smallest–largest)."""
    errs = sorted(
        100 * (m["predicted_peaks"][0] / m["peak"] - 1)
        for m in (_pareto_point(name, p)[2] for p in POINTS)
    )
    if how == "under":
        if errs[-1] >= 0:
            raise KeyError(f"{name}: a predicted peak is not under the measured one")
        return _range([f"{-e:.1f}" for e in reversed(errs)], "pred", "–") + "%"
    return _range([f"{e:+.1f}%" for e in errs], "pred", " .. ")


def pareto_moved(name: str, prev: str, points: str, how: str = "gain") -> str:
    """memopt's overhead at the ``+``-joined ``points`` of run ``name`` against run ``prev``, in
    percentage points of the rounded overheads the tables show: ``gain`` (how much lower,
    range), ``moved`` (signed change, range)."""
    diffs = []
    for p in points.split("+"):
        now = round(float(pareto_pt(name, p, "mover").rstrip("%")), 1)
        then = round(float(pareto_pt(prev, p, "mover").rstrip("%")), 1)
        diffs.append(then - now if how == "gain" else now - then)
    fmt = "{:.1f}" if how == "gain" else "{:+.1f}"
    return _range([fmt.format(x) for x in sorted(diffs)], "moved", "-")


def offload_slower(name: str, prev: str) -> str:
    """``offload.py``: how much slower the offloaded steps (k > 0) of ``name`` ran than the same
    k of ``prev``, ms, range."""
    then = {
        r["k"]: r["step_ms"] for r in load(prev)["rows"] if r.get("sync", "default") == "default"
    }
    diffs = sorted(
        r["step_ms"] - then[r["k"]]
        for r in load(name)["rows"]
        if r["k"] and r.get("sync", "default") == "default"
    )
    return _range([f"{x:.1f}" for x in diffs], "slower", "-")


def peers_saves(name: str, variant: str, other: str, bs: str) -> str:
    """How much shorter per step ``variant`` is than ``other``, whole %."""
    a, b = _peer(name, variant, bs), _peer(name, other, bs)
    return f"{100 * (1 - a['s_per_step'] / b['s_per_step']):.0f}"


def peers_times(name: str, variant: str, sizes: str, start: str, key: str = "times") -> str:
    """Lowest–highest single step of ``variant`` at the ``+``-joined batch ``sizes`` from step
    ``start`` on (``times``; the median is taken over the last 9 of 12; ``A-B``: steps A to B-1),
    s, 2 decimals; ``key`` another per-step list (``host_busy_s``, ``host_wait_s``)."""
    lo, _, hi = start.partition("-")
    cut = slice(int(lo), int(hi) if hi else None)
    vals = sorted(t for bs in sizes.split("+") for t in _peer(name, variant, bs)[key][cut])
    return _range([f"{vals[0]:.2f}", f"{vals[-1]:.2f}"], "times", "–")


def adamw24(field: str, what: str = "ms") -> str:
    """param_cpu_adamw.py of 2026-11-24 (64 Mi elements): ``FIELD`` (``torch_fused_fp32`` ...)
    in ms (``ms``, 1 decimal), or its ratio to ``torch_fused_fp32`` as ``faster:OTHER`` (how much
    shorter than ``OTHER``, whole %) / ``slower`` (over torch's fp32 step, whole %); ``step``:
    torch's fp32 step scaled to the 1.033 B parameters of the 2026-11-25 floor, s, 2 decimals."""
    d = load("adamw24")
    if field == "triad":
        return f"{d['triad_GBps']:.1f}"
    if field == "step":
        return f"{d['torch_fused_fp32_s'] * load('adamw25')['floor']['params'] / d['numel']:.2f}"
    t = d[f"{field}_s"]
    if what == "ms":
        return f"{1e3 * t:.1f}"
    if what == "slower":
        return f"{100 * (t / d['torch_fused_fp32_s'] - 1):.0f}"
    if what.startswith("faster"):
        return f"{100 * (1 - t / d[what.split('=')[1] + '_s']):.0f}"
    raise KeyError(f"no adamw24 value {what!r} (see docs_prose.adamw24)")


def gaps_op(variant: str, op: str = "memopt::offload") -> str:
    """``diag_offload_cost.py``: the most CPU time one ``op`` took in a gap of the row whose
    variant starts with ``variant`` (e.g. ``memopt budget``), us."""
    r = next(r for r in load("diag_offload_gaps.json")["rows"] if r["variant"].startswith(variant))
    us = [e[0] for gap in r["gaps"]["busy_cpu"] for e in gap[2] if e[1] == op]
    return f"{max(us):.0f}"


def pareto_span(name: str, field: str) -> str:
    """:func:`pareto_pt`'s ``field`` over the four budget points, lowest–highest."""
    vals = [pareto_pt(name, p, field) for p in POINTS]
    unit = "%" if vals[0].endswith("%") else ""
    vals = sorted(vals, key=lambda v: float(v.rstrip("%")))
    return _range([v.rstrip("%") for v in vals], "span", "–") + unit


def pareto_var(name: str, variant: str, field: str) -> str:
    """A ``pareto.py`` row (``compile``, ``level1``, ``eager``, ``t0.5``: torch's budget): ``ms`` (1 decimal), ``peak``
    (GiB), ``over`` (against torch.compile, signed %); ``predms`` / ``predpeak``: the planner's
    prediction of the unoptimized step (ms, 1 decimal / GiB)."""
    v = {r["variant"]: r for r in load(name)["rows"]}
    if variant.startswith("t") and variant[1:2].isdigit():
        variant = f"torch.compile budget={variant[1:]}"
    r = v[{"compile": "torch.compile", "level1": "memopt level=1"}.get(variant, variant)]
    pl = next(x for x in v.values() if "planner" in x)["planner"][0]
    out = {
        "ms": lambda: f"{r['ms']:.1f}",
        "peak": lambda: gib(r["peak"]),
        "over": lambda: pct(r["ms"], v["torch.compile"]["ms"]),
        "predms": lambda: f"{1e3 * pl['baseline_step_s']:.1f}",
        "predpeak": lambda: gib(pl["baseline_peak"]),
    }
    return out[field]()


def stability(name: str, what: str) -> str:
    """``offload.py``'s stability line: ``steps`` / ``k`` (how many steps at which k),
    ``growth`` (``+0`` when allocated, reserved, the pinned pool, pinned allocations and
    pending copies all stayed flat; else an error)."""
    line = next(ln for ln in load(name)["report"].splitlines() if ln.startswith("stability"))
    m = re.match(r"stability k=(\d+) over (\d+) steps: growth (.*)$", line)
    if m is None:
        raise KeyError(f"{name}: no stability line")
    if what == "k":
        return m.group(1)
    if what == "steps":
        return m.group(2)
    grown = [g for g in m.group(3).split(", ") if not g.endswith(" +0")]
    if grown:
        raise KeyError(f"{name}: grew: {grown}")
    return "+0"


def peers_ratio(name: str, variant: str, other: str, bs: str, nd: str = "2") -> str:
    """s/step of ``variant`` over ``other``'s (``nd`` decimals): with ``variant`` the slower
    one, how many times faster ``other`` is (its tokens/s over ``variant``'s)."""
    a, b = _peer(name, variant, bs), _peer(name, other, bs)
    return f"{a['s_per_step'] / b['s_per_step']:.{int(nd)}f}"


def peers_auto(name: str, field: str) -> str:
    """``param_offload='auto'``'s choice in a param_peers.py run (its ``auto`` record):
    ``share`` (host share of the parameter bytes, whole %), ``step`` (the device step it
    measured, s), ``adam`` (host AdamW rate, GB/s, 1 decimal), ``update`` (predicted host
    update, s); with a probe: ``alone`` (the rate timed alone, GB/s), ``probe`` (the probe's
    host share, whole %), ``busy`` (median update-worker busy s of the probe steps), ``loaded``
    (the probe's rate under training before the slower rate is taken: its host bytes x 7 / that
    busy time, as memopt/params/auto.py computes it, GB/s), ``pred`` (predicted step, s)."""
    r = next(r for r in load(name)["results"] if "auto" in r)
    a, c = r["auto"], r["auto"]["choice"]

    def loaded() -> str:  # fp32 parameter bytes x ADAMW_TRAFFIC_PER_PARAM_BYTE (7) per busy s
        busy = statistics.median(a["probe_busy_s"])
        return f"{a['probe_host_share'] * 4 * r['params'] * 7 / busy / 1e9:.1f}"

    out = {
        "share": lambda: f"{100 * c['host_share']:.0f}%",
        "step": lambda: f"{c['device_step_s']:.3f}",
        "adam": lambda: f"{c['adam_Bps'] / 1e9:.1f}",
        "update": lambda: f"{c['host_update_s']:.3f}",
        "alone": lambda: f"{a['rates']['adam_Bps'] / 1e9:.1f}",
        "probe": lambda: f"{100 * a['probe_host_share']:.0f}%",
        "busy": lambda: f"{statistics.median(a['probe_busy_s']):.3f}",
        "loaded": loaded,
        "pred": lambda: f"{c['predicted_step_s']:.3f}",
    }
    return out[field]()


def floor_calc(field: str) -> str:
    """Figures derived from the 2026-11-25 host floor (``param_cpu_adamw.py``): ``adamGB`` (28
    B/param per step, GB), ``dmaGB`` (12 B/param, GB), ``step`` ((28 + 12) B/param at the
    in-place rate, s), ``bf16step`` ((28 + 6) B/param, s), ``copy`` / ``read`` / ``write``
    (GB/s, whole)."""
    f = load("adamw25")["floor"]
    n = f["params"]
    out = {
        "adamGB": lambda: f"{28 * n / 1e9:.1f}",
        "dmaGB": lambda: f"{12 * n / 1e9:.1f}",
        "step": lambda: f"{40 * n / (f['inplace_GBps'] * 1e9):.3f}",
        "bf16step": lambda: f"{34 * n / (f['inplace_GBps'] * 1e9):.3f}",
        "copy": lambda: f"{f['copy_GBps']:.0f}",
        "read": lambda: f"{f['read_GBps']:.0f}",
        "write": lambda: f"{f['write_GBps']:.0f}",
    }
    return out[field]()


HOST_SINGLE = ("main_per_param_s", "main_per_group_s", "worker_per_param_s", "worker_per_group_s")


def adamw_runs(which: str) -> str:
    """Run A's host AdamW timings (``param_cpu_adamw_first``) against run B's: ``single`` (the
    four one-worker rows: largest difference, whole %), ``teams`` (the thread-team rows: how
    much faster run A was at most, whole %), ``pergroup`` (per parameter over per group, range,
    whole %, run B)."""
    b = load("adamw25")["host"]
    if which == "pergroup":
        gains = sorted(
            100 * (b[f"{w}_per_param_s"] / b[f"{w}_per_group_s"] - 1) for w in ("main", "worker")
        )
        return _range([f"{g:.0f}" for g in gains], which, "–")
    a = load("param_cpu_adamw_first_2026-11-25.json")["host"]
    if which == "single":
        return f"{max(abs(100 * (a[k] / b[k] - 1)) for k in HOST_SINGLE):.0f}"
    teams = [k for k in a if k.endswith("_s") and "team" in k and "dma" not in k and k in b]
    return f"{max(100 * (1 - a[k] / b[k]) for k in teams):.0f}"


def peers_lossdiff(bs: str) -> str:
    """Largest loss difference between memopt and FSDP2 at batch ``bs`` over the runs of
    2026-11-25 (one significant digit)."""
    diffs = []
    for n in PEER_RUNS:
        try:
            a, b = _peer(n, "memopt", bs), _peer(n, "fsdp2", bs)
        except StopIteration:
            continue
        diffs.append(max(abs(x - y) for x, y in zip(a["losses"], b["losses"])))
    return f"{max(diffs):.0e}".replace("e-0", "e-")


def peers_busy(variant: str = "memopt") -> str:
    """The update worker's median busy time per step of ``variant`` over the runs and batch
    sizes of 2026-11-25, lowest–highest, s."""
    vals = sorted(
        r["host_busy_median_s"]
        for n in PEER_RUNS
        for r in load(n)["results"]
        if r["name"] == variant and r.get("host_busy_median_s") is not None
    )
    return f"{vals[0]:.3f}–{vals[-1]:.3f}"


def peers_need(name: str, bs: str, what: str = "s") -> str:
    """memopt's step for 1.5x FSDP2's tokens/s in run ``name``: ``s`` (s, 2 decimals), ``floor``
    (the offloaded step's floor over it, whole %)."""
    need = _peer(name, "fsdp2", bs)["s_per_step"] / 1.5
    if what == "floor":
        return f"{100 * float(floor_calc('step')) / need:.0f}"
    return f"{need:.2f}"


def host_range(*fields: str) -> str:
    """The 2026-11-25 ``host`` timings ``fields``, lowest–highest, s, 2 decimals."""
    h = load("adamw25")["host"]
    vals = sorted(h[f] for f in fields)
    return _range([f"{vals[0]:.2f}", f"{vals[-1]:.2f}"], "host", "–")


def floor_share(variant: str, bs: str) -> str:
    """The offloaded step's floor (:func:`floor_calc` ``step``) over ``variant``'s s/step in
    each run of 2026-11-25, lowest–highest, whole %."""
    floor = (
        40 * load("adamw25")["floor"]["params"] / (load("adamw25")["floor"]["inplace_GBps"] * 1e9)
    )
    vals = sorted(100 * floor / _peer(n, variant, bs)["s_per_step"] for n in PEER_RUNS)
    return _range([f"{vals[0]:.0f}", f"{vals[-1]:.0f}"], "floor_share", "–")


def json_value(name: str, path: str, decimals: str = "3") -> str:
    """Any number of the data file aliased ``name`` by a dotted ``path`` (list indexes as
    numbers: ``results.1.phases_s.clip``), with ``decimals`` decimals."""
    v = load(name)
    for k in path.split("."):
        v = v[int(k)] if isinstance(v, list) else v[k]
    return f"{v:.{int(decimals)}f}"


def prices(name: str, what: str) -> str:
    """``prices_{name}.json`` (benchmarks/diag_prices.py): the step's ``step_priced`` or
    ``step_measured`` (profiled) ms, 2 decimals, the sum over kinds."""
    d = load(f"prices_{name}.json")
    field = {"step_priced": "priced_s", "step_measured": "measured_s"}[what]
    return f"{sum(d[field].values()) * 1e3:.2f}"
