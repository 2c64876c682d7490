"""docs/benchmarks.md's memory/time fronts, FSDP2 step plans and planning times, rendered from
benchmarks/pareto.py, fsdp_step.py and plan_time.py JSON."""

from __future__ import annotations

from benchmarks.docs_fmt import by_variant, gib, minus, pct, table, verdict

_FSDP_LABELS = {
    "torch.compile budget=0.5": "torch.compile, `activation_memory_budget` 0.5",
    "torch.compile budget=0.1": "torch.compile, `activation_memory_budget` 0.1",
    "memopt level=1": "memopt level 1",
}


def _fsdp_label(r: dict) -> str:
    v = r["variant"]
    if v in _FSDP_LABELS:
        return _FSDP_LABELS[v]
    if "target" in r:
        point, _, rest = v.split("(torch ")[1].partition(")")
        return f"memopt `budget=` torch {point}'s peak ({gib(r['target'])} GiB){rest}"
    if v.startswith("memopt "):
        return f"memopt `{v.split(' ', 1)[1]}`"
    return v


def _fsdp_table(d: dict, heads: tuple[str, ...], cells) -> str:
    """fsdp_step.py rows: variant, step ms, against torch.compile, ``cells(row)`` under
    ``heads``, the last recorded loss."""
    base = by_variant(d)["torch.compile"]["ms"]
    rows = [
        (
            _fsdp_label(r),
            f"{r['ms']:.1f}",
            "0" if r["variant"] == "torch.compile" else pct(r["ms"], base),
            *cells(r),
            f"{r['losses'][-1]:.4f}",
        )
        for r in d["rows"]
    ]
    loss = f"loss, step {len(d['rows'][0]['losses'])}"
    return table(("variant", "step ms", "vs compile", *heads, loss), rows)


def fsdp_step(d: dict) -> str:
    def cells(r: dict) -> tuple[str, str]:
        pred = ""
        if "target" in r and r.get("predicted_step_peak"):
            pred = gib(r["predicted_step_peak"])
            if r.get("measured_peak_seen"):
                pred += " (with a measured correction)"
            elif r.get("feasible") is False:
                pred += f" (infeasible: target {gib(r['step_target'])} after the 2.5% reserve)"
        peak = gib(r["peak"])
        return (f"**{peak}**" if r["variant"] == "memopt level=1" else peak), pred

    return _fsdp_table(d, ("peak GiB", "predicted step peak GiB"), cells)


def fsdp_step_s8(d: dict) -> str:
    """fsdp_step.py rows of the eighth session: who set the offload, bytes moved, the peak
    against the budget."""

    def cells(r: dict) -> tuple[str, str, str, str]:
        over = pred = off = ""
        if "target" in r:
            over = pct(r["peak"], r["target"], 2)
            pred = gib(r["predicted_step_peak"]) if r.get("predicted_step_peak") else ""
            pred += "" if r.get("feasible") is not False else " (infeasible)"
        if r.get("offloaded_bytes"):
            by = r.get("offload_by") or (
                f"offload_layers={r['k']}" if "k" in r else "chosen by the step plan"
            )
            off = f"{gib(r['offloaded_bytes'])} GiB ({by})"
        return gib(r["peak"]), over, pred, off

    heads = ("peak GiB", "peak vs budget", "predicted step peak GiB", "offloaded per step")
    return _fsdp_table(d, heads, cells)


def pareto_front(d: dict, prev: dict) -> str:
    """torch budgets vs memopt at torch's peak, this run and [the previous run]."""
    v, p = by_variant(d), by_variant(prev)
    base, pbase = v["torch.compile"], p["torch.compile"]
    rows = [
        (
            "none",
            f"{base['ms']:.2f} ms, {gib(base['peak'], 3)} GiB "
            f"[{pbase['ms']:.2f}, {gib(pbase['peak'], 3)}]",
            "",
            "",
            "",
        )
    ]
    for b in ("0.8", "0.5", "0.3", "0.1"):
        t = v[f"torch.compile budget={b}"]
        name = next(k for k in v if k.endswith(f"(torch {b})"))
        m, pm = v[name], p[name]
        t_over = 100 * (t["ms"] / base["ms"] - 1)
        m_over = 100 * (m["ms"] / base["ms"] - 1)
        half = t_over / 2
        said = verdict(m_over, half)
        rows.append(
            (
                b,
                f"{gib(t['peak'], 3)} GiB, {t_over:+.1f}%",
                f"{gib(m['peak'], 3)} GiB, {m_over:+.1f}% "
                f"[{gib(pm['peak'], 3)}, {pct(pm['ms'], pbase['ms'])}]",
                f"{gib(m['predicted_peaks'][0], 3)} GiB",
                f"{half:+.1f}%: {said}" if said != "met" else "met",
            )
        )
    lvl, plvl = v["memopt level=1"], p["memopt level=1"]
    rows.append(
        (
            "level 1",
            "",
            f"{gib(lvl['peak'], 3)} GiB, {pct(lvl['ms'], base['ms'])} "
            f"[{gib(plvl['peak'], 3)}, {pct(plvl['ms'], pbase['ms'])}]",
            "",
            "",
        )
    )
    heads = (
        "torch budget",
        "torch.compile + budget",
        "memopt at torch's peak",
        "predicted peak",
        "half of torch's overhead",
    )
    return table(heads, rows)


def pareto_points(d: dict) -> str:
    """torch's budget points vs memopt at each of torch's peaks, with the planner's predictions."""
    v = by_variant(d)
    base = v["torch.compile"]["ms"]
    rows = []
    for b in ("0.8", "0.5", "0.3", "0.1"):
        t = v[f"torch.compile budget={b}"]
        m = v[next(k for k in v if k.endswith(f"(torch {b})"))]
        t_over, m_over = 100 * (t["ms"] / base - 1), 100 * (m["ms"] / base - 1)
        said = verdict(m_over, t_over / 2)
        pl = m["planner"][0]
        pred = pl["predicted_peak"]
        rows.append(
            (
                b,
                f"{gib(t['peak'])} GiB",
                f"{t_over:+.1f}%",
                f"**{gib(m['peak'])} GiB**",
                f"{m_over:+.1f}%",
                f"{t_over / 2:+.1f}% ({said})",
                f"{gib(pred)} ({pct(pred, m['peak'])})",
                f"{1e3 * pl['predicted_overhead_s']:.2f} ms "
                f"({100 * pl['predicted_overhead_s'] / pl['baseline_step_s']:+.1f}%; "
                f"offload {gib(pl['saved_bytes_offloaded'])} GiB)",
            )
        )
    heads = (
        "torch budget",
        "torch peak",
        "torch overhead",
        "memopt peak",
        "memopt overhead",
        "target (half of torch's)",
        "planner's predicted peak",
        "predicted overhead",
    )
    return table(heads, rows)


def pareto_others(d: dict) -> str:
    """The front's other rows as one line."""
    v = by_variant(d)
    base = v["torch.compile"]
    parts = []
    for name, label in (
        ("eager", "eager"),
        ("eager + per-layer checkpointing", "eager + per-layer checkpointing"),
        ("torch.compile", "torch.compile"),
        ("memopt level=1", "memopt level=1"),
    ):
        r = v[name]
        over = "" if name == "torch.compile" else f" ({pct(r['ms'], base['ms'])})"
        parts.append(f"{label} {gib(r['peak'])} GiB, {r['ms']:.1f} ms{over}")
    return "Other rows: " + "; ".join(parts) + ".\n"


def plan_time(d: dict) -> str:
    rows = []
    for r in d["rows"]:
        t = r["timers"]
        planner = ""
        if "plan_budget" in t:
            planner = (
                f"{t['plan_budget']:.2f} ({t['plan_budget.build_problem']:.2f} + "
                f"{t['plan_budget.solve']:.2f})"
            )
        passes = f"{r['plan_seconds']:.2f}" if "plan_seconds" in r else "–"
        label = {"compile": "torch.compile", "memopt-level0": "memopt level=0"}.get(
            r["variant"], r["variant"].replace("memopt-budget-", "memopt budget=")
        )
        rows.append((label, f"{r['compile_s']:.1f}", passes, planner or "–"))
    heads = ("variant", "compile s", "memopt pass pipeline s", "budget planner s (build + solve)")
    return table(heads, rows)


def pareto_variants(d: dict, *, predicted: bool = True) -> str:
    """Every variant of one ``pareto.py`` run against its torch.compile."""
    base = by_variant(d)["torch.compile"]["ms"]
    rows = []
    for r in d["rows"]:
        label = r["variant"].replace(")", "'s peak)") if "(torch " in r["variant"] else r["variant"]
        pred = ""
        if "predicted_peaks" in r:
            pred = minus(
                f"{gib(r['predicted_peaks'][0])} ({pct(r['predicted_peaks'][0], r['peak'])})"
            )
        elif r["variant"] == "torch.compile":
            unopt = next(x for x in d["rows"] if "planner" in x)["planner"][0]["baseline_peak"]
            pred = minus(f"{gib(unopt)} (unoptimized, {pct(unopt, r['peak'])})")
        cells = [label, gib(r["peak"]), f"{r['ms']:.1f}", f"{100 * (r['ms'] / base - 1):+.1f}%"]
        rows.append((*cells, pred) if predicted else cells)
    heads = ("variant", "peak GiB", "step ms", "overhead vs compile")
    return table((*heads, "planner's predicted peak") if predicted else heads, rows)


def pareto_rerun(d: dict, torch_run: dict) -> str:
    """memopt re-measured against torch's points of an earlier run (each against its own
    run's torch.compile)."""
    v, t = by_variant(d), by_variant(torch_run)
    base, tbase = v["torch.compile"]["ms"], t["torch.compile"]["ms"]
    rows = []
    for b in ("0.8", "0.5", "0.3", "0.1"):
        tr = t[f"torch.compile budget={b}"]
        m = v[next(k for k in v if k.endswith(f"(torch {b})"))]
        t_over, m_over = 100 * (tr["ms"] / tbase - 1), 100 * (m["ms"] / base - 1)
        pred = m["predicted_peaks"][0]
        rows.append(
            (
                b,
                f"{gib(tr['peak'])} GiB",
                f"{t_over:+.1f}%",
                f"**{gib(m['peak'])} GiB**",
                f"{m_over:+.1f}%",
                f"{t_over / 2:+.1f}% ({verdict(m_over, t_over / 2)})",
                minus(f"{gib(pred)} ({pct(pred, m['peak'])})"),
            )
        )
    heads = ("torch budget", "torch peak", "torch overhead", "memopt peak", "memopt overhead")
    return table((*heads, "target (half of torch's)", "predicted peak"), rows)


def largest_batch(d: dict) -> str:
    """``largest_batch.py``: torch.compile's largest batch, then every memopt batch that trained,
    tokens/s against torch.compile's at its largest batch (bold at twice its batch)."""
    comp = {t["batch"]: t for t in d["variants"]["compile"]["trials"]}
    best = max(b for b, t in comp.items() if t["ok"])
    oom = [b for b, t in comp.items() if not t["ok"] and b > best]
    ref = comp[best]["tokens_per_s"]
    rows = [
        (
            "torch.compile",
            f"{best}" + (f" ({min(oom)}: OOM)" if oom else ""),
            f"{ref:,.0f}",
            "100%",
            gib(comp[best]["peak"]),
        )
    ]
    budget = gib(d["meta"]["memopt_budget_bytes"])
    for t in sorted(d["variants"]["memopt-budget"]["trials"], key=lambda t: t["batch"]):
        b = t["batch"]
        note = " (2× compile's)" if b == 2 * best else ""
        note += " (= --max-batch)" if b == d["meta"]["max_batch"] else ""
        if not t["ok"]:
            rows.append((f"memopt budget={budget} GiB, batch {b}{note}", "OOM", "", "", ""))
            continue
        share = f"{100 * t['tokens_per_s'] / ref:.1f}%"
        rows.append(
            (
                f"memopt budget={budget} GiB, batch {b}{note}",
                "fits",
                f"{t['tokens_per_s']:,.0f}",
                f"**{share}**" if b == 2 * best else share,
                gib(t["peak"]),
            )
        )
    heads = ("variant", "largest batch", "tokens/s", "vs compile's tokens/s", "peak GiB")
    return table(heads, rows)
