"""The generated tables of the docs: one renderer per section, each a function of its JSON.

``SECTIONS[name]`` names the docs/data files a section reads and the function that turns them
into markdown; ``benchmarks/docs_numbers.py`` puts the result between the section's markers.
Labels and verdicts are derived from the data (e.g. "met" when memopt's overhead is at most half
of torch's); hand-written prose stays outside the markers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20


def gib(b: float, nd: int = 2) -> str:
    return f"{b / GiB:.{nd}f}"


def pct(x: float, base: float, nd: int = 1) -> str:
    return f"{100 * (x / base - 1):+.{nd}f}%"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        cells = ("" if c is None else str(c) for c in r)
        out.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Section:
    files: tuple[str, ...]  # under docs/data
    render: Callable[..., str]  # called with the loaded JSON of each file, in order


def by_variant(data: dict) -> dict[str, dict]:
    return {r["variant"]: r for r in data["rows"]}


# ---- README: the demo's plan table -------------------------------------------------------


def readme_demo(d: dict) -> str:
    return "```\n" + "\n".join(d["table_head"]) + "\n...\n```\n"


# ---- docs/cli.md: timings of the CLI on the 2-core box -------------------------------------


def cli_timings(d: dict) -> str:
    rows = []
    for r in d["rows"]:
        label = f"`{r['command']}`" + (f" ({r['label']})" if r.get("label") else "")
        rows.append(
            (
                label,
                r["traced"],
                f"{r['wall_s']:.0f} s",
                f"{r['user_s']:.1f} + {r['sys_s']:.1f} s",
                f"{r['max_rss_kib'] / (1 << 20):.2f} GiB",
            )
        )
    head = (
        f"Measured on {d['date']} on the {d['host']} (torch {d['torch']}, transformers "
        f"{d['transformers']}), one command after the other, load average "
        f"{d['load_min']:.1f} to {d['load_max']:.1f}:\n\n"
    )
    phases = "\nCPU seconds per phase (the closing line of `--progress`):\n\n" + "".join(
        f"* `{r['command']}`: {r['cpu_phases']}\n" for r in d["rows"] if r.get("cpu_phases")
    )
    return head + table(("command", "traced", "wall", "CPU (user + sys)", "max RSS"), rows) + phases


# ---- docs/benchmarks.md -------------------------------------------------------------------

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
        return (
            f"memopt `budget=` torch {v.split('(torch ')[1][:-1]}'s peak ({gib(r['target'])} GiB)"
        )
    if v.startswith("memopt "):
        return f"memopt `{v.split(' ', 1)[1]}`"
    return v


def fsdp_step(d: dict) -> str:
    base = by_variant(d)["torch.compile"]["ms"]
    rows = []
    for r in d["rows"]:
        pred = ""
        if "target" in r and r.get("predicted_step_peak"):
            pred = gib(r["predicted_step_peak"])
            if r.get("measured_peak_seen"):
                pred += " (with a measured correction)"
            elif r.get("feasible") is False:
                pred += f" (infeasible: target {gib(r['step_target'])} after the 2.5% reserve)"
        peak = gib(r["peak"])
        rows.append(
            (
                _fsdp_label(r),
                f"{r['ms']:.1f}",
                "0" if r["variant"] == "torch.compile" else pct(r["ms"], base),
                f"**{peak}**" if r["variant"] == "memopt level=1" else peak,
                pred,
                f"{r['losses'][-1]:.4f}",
            )
        )
    heads = ("variant", "step ms", "vs compile", "peak GiB", "predicted step peak GiB")
    return table((*heads, f"loss, step {len(d['rows'][0]['losses'])}"), rows)


def _verdict(memopt: float, half: float) -> str:
    """'met', or 'missed by X pt', on the rounded percentages the table shows."""
    m, h = round(memopt, 1), round(half, 1)
    return "met" if m <= h else f"missed by {m - h:.1f} pt"


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
        verdict = _verdict(m_over, half)
        rows.append(
            (
                b,
                f"{gib(t['peak'], 3)} GiB, {t_over:+.1f}%",
                f"{gib(m['peak'], 3)} GiB, {m_over:+.1f}% "
                f"[{gib(pm['peak'], 3)}, {pct(pm['ms'], pbase['ms'])}]",
                f"{gib(m['predicted_peaks'][0], 3)} GiB",
                f"{half:+.1f}%: {verdict}" if verdict != "met" else "met",
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


def offload_rows(d: dict, prev: dict) -> str:
    """Activation offload at k layers, this run and [the previous run]."""
    base = {r["k"]: r for r in d["rows"]}
    old = {r["k"]: r for r in prev["rows"]}
    b0, o0 = base[0]["step_ms"], old[0]["step_ms"]
    rows = []
    for k, r in sorted(base.items()):
        o = old.get(k)
        if k == 0:
            step = f"{b0:.1f} [{o0:.1f}]"
            off = "0"
        else:
            step = f"{r['step_ms']:.1f}, {pct(r['step_ms'], b0)} [{o['step_ms']:.1f}, {pct(o['step_ms'], o0)}]"
            off = _bytes(r["offloaded_bytes"])
            off += " [same]" if o and o["offloaded_bytes"] == r["offloaded_bytes"] else ""
        rows.append(
            (
                k,
                step,
                f"{gib(r['peak_bytes'], 3)} [{gib(o['peak_bytes'], 3)}]",
                off,
                "" if k == 0 else ("yes" if r.get("grads_bitwise_equal") else "no"),
            )
        )
    return table(("k", "step ms", "peak GiB", "offloaded", "grads bitwise"), rows)


def pareto_points(d: dict) -> str:
    """torch's budget points vs memopt at each of torch's peaks, with the planner's predictions."""
    v = by_variant(d)
    base = v["torch.compile"]["ms"]
    rows = []
    for b in ("0.8", "0.5", "0.3", "0.1"):
        t = v[f"torch.compile budget={b}"]
        m = v[next(k for k in v if k.endswith(f"(torch {b})"))]
        t_over, m_over = 100 * (t["ms"] / base - 1), 100 * (m["ms"] / base - 1)
        verdict = _verdict(m_over, t_over / 2)
        pl = m["planner"][0]
        pred = pl["predicted_peak"]
        rows.append(
            (
                b,
                f"{gib(t['peak'])} GiB",
                f"{t_over:+.1f}%",
                f"**{gib(m['peak'])} GiB**",
                f"{m_over:+.1f}%",
                f"{t_over / 2:+.1f}% ({verdict})",
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


_PEER_LABELS = {
    "gpu": "gpu: all on the GPU, torch AdamW(fused)",
    "fsdp2": "fsdp2",
    "memopt": "**memopt f=1**",
    "memopt+threads=auto": 'same, `threads="auto"` (15 of 16 cores)',
    "memopt-bf16host+chunk=4194304": (
        "memopt, bf16 host shards (`host_dtype=bf16`), 4 Mi-element pieces"
    ),
    "memopt+batch=param": 'memopt, one task per parameter (`batch="param"`, the old queue)',
    "torchao": (
        "torchao 0.18 `CPUOffloadOptimizer(offload_gradients=True)` (wheel carried to the device)"
    ),
}
#: first rows of a table get the long labels
_PEER_FIRST = {
    "fsdp2": "fsdp2: `CPUOffloadPolicy` every group, torch AdamW(fused) on the CPU after backward",
    "memopt": "**memopt f=1, HostAdamW overlap, per-group tasks (default)**",
}


def param_peers(*runs: dict) -> str:
    """Runs B, A, C of 2026-11-25 (files in that order), each row against its run's fsdp2."""
    rows = []
    seen: set[str] = set()
    for letter, d in zip("BAC", runs):
        res = d["results"]
        fsdp = {(r["bs"], r["seq"]): r for r in res if r["name"] == "fsdp2" and "error" not in r}
        oom = [(r["bs"], r["seq"]) for r in res if r.get("error") == "OOM"]
        rank = {"gpu": 0, "fsdp2": 1, "memopt": 2}
        res = sorted(
            res,
            key=lambda r: (r["name"] == "torchao", r["bs"] * r["seq"], rank.get(r["name"], 3)),
        )
        for r in res:
            size = (r["bs"], r["seq"])
            if "error" in r:
                if r["name"] == "fsdp2" and size in oom:
                    who = " / ".join(
                        sorted(
                            {
                                x["name"]
                                for x in res
                                if x.get("error") and (x["bs"], x["seq"]) == size
                            }
                        )
                    )
                    rows.append(
                        (
                            letter,
                            who,
                            f"{r['bs']} × {r['seq']}",
                            f"{r.get('cap_gib', 3.5)}",
                            "out of memory (both)",
                            "",
                            "",
                            "",
                            "",
                            "",
                        )
                    )
                continue
            name = r["name"]
            label = _PEER_FIRST.get(name) if name not in seen and letter == "B" else None
            if label is None:
                label = _PEER_LABELS.get(name, name)
                if name == "memopt" and size == (2, 512) and letter != "B":
                    label = "**memopt f=1 (default)**"
            seen.add(name)
            bold = label.startswith("**")
            f = fsdp.get(size)
            ratio = f"{r['tokens_per_s'] / f['tokens_per_s']:.2f}" if f and name != "gpu" else ""
            cap = r["cap_gib"]
            cap = "none" if cap is None else f"{cap:g}"
            if name == "torchao":
                cap = "none (fp32 params on the GPU)"
            busy = (
                f"{r['host_busy_median_s']:.3f} / {r['host_wait_median_s']:.3f}"
                if "host_busy_median_s" in r
                else ""
            )

            def b(x: str, bold: bool = bold) -> str:
                return f"**{x}**" if bold and x else x

            rows.append(
                (
                    letter,
                    label,
                    f"{r['bs']} × {r['seq']}",
                    cap,
                    b(f"{r['s_per_step']:.3f}"),
                    b(f"{r['tokens_per_s']:,.0f}"),
                    b(ratio) if name != "fsdp2" else "1.00",
                    f"{r['peak_gib']:.2f}",
                    f"{r['VmHWM'] / GiB:.1f}",
                    busy,
                )
            )
    heads = ("run", "variant", "batch", "cap GiB", "s/step", "tokens/s", "vs fsdp2")
    return table(
        (*heads, "GPU peak GiB", "host RSS GiB", "update worker busy / wait, s/step"), rows
    )


def host_adamw(d: dict) -> str:
    """CPU AdamW over the model's parameters on the device host (``param_cpu_adamw.py host``)."""
    h = d["host"]

    def row(label: str, *keys: str, gbps: bool = True) -> tuple[str, str, str]:
        s = " / ".join(f"{h[k + '_s']:.3f}" for k in keys)
        g = " / ".join(f"{h[k + '_GBps']:.0f}" for k in keys) if gbps else ""
        return label, s, g

    rows = [
        row("training thread, one call per parameter", "main_per_param"),
        row("training thread, one call per layer group (lists)", "main_per_group"),
        row("worker thread, one call per parameter", "worker_per_param"),
        row("worker thread, one call per group (HostAdamW now)", "worker_per_group"),
        row("worker, team of 15 / 8 / 4 threads", "worker_team15", "worker_team8", "worker_team4"),
        row(
            "2 workers x 8 threads / 4 workers x 4 threads, groups split between them",
            "workers2_team8",
            "workers4_team4",
        ),
        (
            f"worker, 16 threads, beside pinned H2D + D2H copies "
            f"({h['dma_GBps_during_teamdefault']:.0f} GB/s of PCIe)",
            f"{h['worker_teamdefault_with_dma_s']:.3f}",
            f"{h['worker_teamdefault_with_dma_GBps']:.0f}",
        ),
        (
            f"worker, 15 threads, same copies ({h['dma_GBps_during_team15']:.0f} GB/s)",
            f"{h['worker_team15_with_dma_s']:.3f}",
            f"{h['worker_team15_with_dma_GBps']:.0f}",
        ),
        row(
            "bf16 gradient in, bf16 copy out (`torch_update`): 4 Mi / 16 Mi pieces / whole tensors",
            "bf16_writeback_chunk4194304",
            "bf16_writeback_chunk16777216",
            "bf16_writeback_chunk1073741824",
            gbps=False,
        ),
    ]
    return table(("how the update runs", "s", "GB/s (28 B/param)"), rows)


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


def offload_sweep(d: dict, *, sync: bool = True, zero: bool = True, ms: bool = True) -> str:
    """``benchmarks/offload.py``'s rows (its ``report``): the forward budget is D2H bandwidth
    times the baseline's forward time; drop/offloaded is the peak's drop over the bytes moved."""
    base = d["rows"][0]
    budget = d["bandwidth"]["d2h"] * 1e9 * base["fwd_ms"] / 1e3
    rows = []
    for r in d["rows"] if zero else d["rows"][1:]:
        off = r["offloaded_bytes"]
        tr = r.get("trace", {}).get("d2h", {})
        if not off:
            cells = ["0", f"{gib(r['peak_bytes'])} GiB", "–", f"{r['step_ms']:.1f}", "–"]
            cells += ["–"] * 4
        else:
            grads = "yes"
            if not r.get("grads_bitwise_equal"):
                grads = f"no (max diff {r['grads_max_abs_diff']:.2e})"
            gbps = tr.get("gbps", 0.0)
            cells = [
                _bytes(off),
                f"{gib(r['peak_bytes'])} GiB",
                f"{(base['peak_bytes'] - r['peak_bytes']) / off:.2f}",
                f"{r['step_ms']:.1f}",
                pct(r["step_ms"], base["step_ms"])[:-1],
                "yes" if off <= budget else "no",
                f"{gbps:.1f} ({gbps / d['bandwidth']['d2h']:.0%})" if gbps else "",
                f"{tr['overlap']:.0%}" if "overlap" in tr else "",
                grads,
            ]
        lead = [r["k"], r.get("sync", "default") if off else "–"] if sync else [r["k"]]
        if not ms:
            del cells[3]
        rows.append((*lead, *cells))
    heads = ("offloaded", "peak", "drop/offloaded", "step ms", "step +%", "fits budget")
    heads = heads if ms else tuple(h for h in heads if h != "step ms")
    heads += ("D2H GB/s (of memcpy)", "D2H overlap", "grads bitwise")
    return table((("k", "sync") if sync else ("k",)) + heads, rows)


def _minus(s: str) -> str:
    return s.replace("-", "\u2212")


def pareto_variants(d: dict, *, predicted: bool = True) -> str:
    """Every variant of one ``pareto.py`` run against its torch.compile."""
    base = by_variant(d)["torch.compile"]["ms"]
    rows = []
    for r in d["rows"]:
        label = r["variant"].replace(")", "'s peak)") if "(torch " in r["variant"] else r["variant"]
        pred = ""
        if "predicted_peaks" in r:
            pred = _minus(
                f"{gib(r['predicted_peaks'][0])} ({pct(r['predicted_peaks'][0], r['peak'])})"
            )
        elif r["variant"] == "torch.compile":
            unopt = next(x for x in d["rows"] if "planner" in x)["planner"][0]["baseline_peak"]
            pred = _minus(f"{gib(unopt)} (unoptimized, {pct(unopt, r['peak'])})")
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
                f"{t_over / 2:+.1f}% ({_verdict(m_over, t_over / 2)})",
                _minus(f"{gib(pred)} ({pct(pred, m['peak'])})"),
            )
        )
    heads = ("torch budget", "torch peak", "torch overhead", "memopt peak", "memopt overhead")
    return table((*heads, "target (half of torch's)", "predicted peak"), rows)


def offload_gaps(d: dict) -> str:
    """``diag_offload_cost.py``: idle gaps of the compute stream blamed on the CPU or a wait."""
    labels = {
        "memopt budget=4928556544": "budget plan (torch 0.5's peak; {n} offloads)",
        "offload_layers=1": "offload_layers=1 ({n} offloads in layer 0)",
    }
    rows = []
    for r in d["rows"]:
        g = r["gaps"]
        ops = g["memopt_cpu_ops"]
        n = ops.get("memopt::offload", [0])[0]
        cpu = "-"
        if ops:
            waits = sum(
                ops.get(k, [0, 0])[1] for k in ("memopt::wait_reload", "memopt::wait_offload")
            )
            cpu = (
                f"offload {ops['memopt::offload'][1] / 1e3:.1f} ms, reload "
                f"{ops['memopt::reload'][1] / 1e3:.1f} ms, waits {waits / 1e3:.1f} ms"
            )
        rows.append(
            (
                labels.get(r["variant"], r["variant"]).format(n=n),
                f"{r['ms']:.1f}",
                f"{r['kernel_ms']:.1f}",
                f"{g['cpu_us'] / 1e3:.2f} ms",
                f"{g['wait_us'] / 1e3:.2f} ms" if g["wait_us"] else "0",
                cpu,
            )
        )
    heads = ("variant", "step ms", "kernel ms", "CPU-caused idle", "wait-caused idle")
    return table((*heads, "CPU time in memopt ops per step"), rows)


#: (run, file index, job name, batch, label) in the table's order (param_peers 2026-11-24)
_PEERS_1124 = (
    ("A", 0, "gpu", 2, "gpu: all on the GPU, torch AdamW(fused)"),
    ("A", 0, "gpu", 4, "gpu"),
    ("A", 0, "fsdp2", 2, "fsdp2: `CPUOffloadPolicy` every group, torch AdamW(fused) on the CPU"),
    ("A", 0, "fsdp2", 4, "fsdp2"),
    ("A", 0, "fsdp2", 8, "fsdp2"),
    ("A", 0, "memopt", 2, "memopt f=1, bf16 host shards, HostAdamW overlap (step waits)"),
    ("A", 0, "memopt-nooverlap", 2, "same, no overlap"),
    ("A", 0, "memopt-fp32host", 2, "memopt f=1, fp32 host shards, overlap (step waits)"),
    ("A", 0, "memopt", 4, "memopt f=1, bf16 host shards, overlap"),
    ("A", 0, "memopt", 8, "memopt f=1"),
    ("A", 0, "memopt-half", 2, "memopt f=0.5, bf16 host shards, overlap"),
    ("A", 0, "streamer", 2, "old streamer `apply_param_offload(0.9)` + CPUAdamW (deleted since)"),
    ("B", 1, "fsdp2", 2, "fsdp2"),
    ("B", 1, "fsdp2", 4, "fsdp2"),
    (
        "B",
        1,
        "memopt",
        2,
        "**memopt f=1, fp32 host shards, overlap pipelined into the next forward (the default "
        "now)**",
    ),
    ("B", 1, "memopt", 4, "same"),
)


def param_peers_1124(*runs: dict) -> str:
    """Runs A and B of 2026-11-24; loss diff = max |loss - loss of run A's uncapped gpu row|
    over the steps (same seed and data)."""
    gpu = {r["bs"]: r["losses"] for r in runs[0]["results"] if r["name"] == "gpu"}
    rows = []
    for run, i, name, bs, label in _PEERS_1124:
        r = next(x for x in runs[i]["results"] if x["name"] == name and x["bs"] == bs)
        batch = f"{r['bs']} × {r['seq']}"
        if "error" in r:
            rows.append((run, label, batch, "3.5", "out of memory", "", "", "", ""))
            continue
        diff = max(abs(a - b) for a, b in zip(r["losses"], gpu[bs]))
        cap = "none" if r["cap_gib"] is None else f"{r['cap_gib']:g}"
        rows.append(
            (
                run,
                label,
                batch,
                cap,
                f"{r['s_per_step']:.3f}",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['peak_gib']:.2f}",
                f"{r['VmHWM'] / GiB:.1f}",
                "0" if diff == 0 else f"{diff:.4f}",
            )
        )
    heads = ("run", "variant", "batch", "cap GiB", "s/step", "tokens/s", "GPU peak GiB")
    return table((*heads, "host RSS peak GiB", "loss diff"), rows)


def cpu_adamw_1124(d: dict) -> str:
    """``param_cpu_adamw.py`` (64 M elements, best of 5) on the device host."""
    rows = [
        ("torch.optim.AdamW(fused=True), fp32 param and grad", "torch_fused_fp32"),
        (
            "torch fused + bf16 write-back (grad cast in, step, cast out)",
            "torch_fused_bf16_writeback",
        ),
        (
            "memopt `torch_update`, bf16 grad + bf16 write-back, 1 Mi-element pieces",
            "memopt_bf16_writeback",
        ),
        (
            "memopt `torch_update`, same, whole tensors (the default)",
            "memopt_bf16_writeback_unchunked",
        ),
    ]
    body = [
        (label, f"{1e3 * d[k + '_s']:.1f}", f"{d[k + '_vs_torch_fused_fp32']:.2f}")
        for label, k in rows
    ]
    return table(("update", "ms", "vs torch fused fp32"), body)


def offload_first(d: dict) -> str:
    """The first 4-layer sweep (``offload.py --model llama``): drop and copy overlap columns."""
    base = d["rows"][0]
    budget = d["bandwidth"]["d2h"] * 1e9 * base["fwd_ms"] / 1e3
    rows = []
    for r in d["rows"]:
        off, drop = r["offloaded_bytes"], base["peak_bytes"] - r["peak_bytes"]
        cells = [r["k"], _bytes(off) if off else "0", f"{gib(r['peak_bytes'])} GiB"]
        cells.append(_bytes(drop) if drop else "0")
        if not off:
            cells += ["–", f"{r['step_ms']:.1f}", "+0.0", "–", "–", "–"]
        else:
            tr = r["trace"]["d2h"]
            cells += [
                f"{drop / off:.2f}",
                f"{r['step_ms']:.1f}",
                pct(r["step_ms"], base["step_ms"])[:-1],
                "yes" if off <= budget else "no",
                f"{tr['gbps']:.1f} ({tr['gbps'] / d['bandwidth']['d2h']:.0%})",
                f"{tr['overlap']:.0%}",
            ]
        rows.append(cells)
    heads = ("k", "offloaded", "peak", "drop", "drop/offloaded", "step ms", "step +%")
    return table((*heads, "fits budget", "D2H GB/s (of memcpy)", "copy overlap"), rows)


def _bytes(b: int) -> str:
    return f"{b / GiB:.2f} GiB" if b >= GiB else f"{b / MiB:.0f} MiB"


def _load(data: Path, name: str) -> Any:
    return json.loads((data / name).read_text())


SECTIONS: dict[str, Section] = {
    "readme_demo": Section(("readme_demo.json",), readme_demo),
    "cli_timings": Section(("cli_timings.json",), cli_timings),
    "fsdp_step_per_run": Section(("fsdp_step_2026-11-25_per_run.json",), fsdp_step),
    "pareto_llama_v7": Section(("pareto_llama_v7.json", "pareto_llama_v6.json"), pareto_front),
    "offload_llama8_v4": Section(
        ("offload_llama8_v4.json", "offload_llama8_v3.json"), offload_rows
    ),
    "pareto_llama_v6": Section(("pareto_llama_v6.json",), pareto_points),
    "pareto_llama_v6_others": Section(("pareto_llama_v6.json",), pareto_others),
    "pareto_gpt2_b32": Section(("pareto_gpt2_b32.json",), pareto_points),
    "pareto_gpt2_b32_others": Section(("pareto_gpt2_b32.json",), pareto_others),
    "param_peers_2026-11-25": Section(
        (
            "param_peers_2026-11-25.json",
            "param_peers_batching_2026-11-25.json",
            "param_peers_repeat_2026-11-25.json",
        ),
        param_peers,
    ),
    "param_host_adamw_2026-11-25": Section(("param_cpu_adamw_2026-11-25.json",), host_adamw),
    "param_peers_2026-11-24": Section(
        ("param_peers_2026-11-24.json", "param_peers_pipelined_2026-11-24.json"), param_peers_1124
    ),
    "param_cpu_adamw_2026-11-24": Section(("param_cpu_adamw_2026-11-24.json",), cpu_adamw_1124),
    "plan_time_llama": Section(("plan_time_llama.json",), plan_time),
    "offload_llama8_v3": Section(
        ("offload_llama8_v3.json",), lambda d: offload_sweep(d, sync=False, zero=False)
    ),
    "offload_gpt6_v2": Section(
        ("offload_gpt6_v2.json",), lambda d: offload_sweep(d, zero=False, ms=False)
    ),
    "offload_llama8": Section(("offload_llama8.json",), offload_sweep),
    "pareto_llama": Section(("pareto_llama.json",), pareto_variants),
    "pareto_gpt2": Section(("pareto_gpt2.json",), lambda d: pareto_variants(d, predicted=False)),
    "pareto_llama_memopt_v2": Section(
        ("pareto_llama_memopt_v2.json", "pareto_llama.json"), pareto_rerun
    ),
    "diag_offload_gaps": Section(("diag_offload_gaps.json",), offload_gaps),
    "offload_gpt6": Section(("offload_gpt6.json",), offload_sweep),
    "offload_llama": Section(("offload_llama.json",), offload_first),
}


def _zoo(data: Path, device: str) -> str:
    """zoo.py's own table (``zoo.markdown``) from ``zoo_<device>.json``, at its torch version."""
    from unittest import mock

    import torch

    from benchmarks import zoo

    d = _load(data, f"zoo_{device}.json")
    with mock.patch.object(torch, "__version__", d["torch"]):
        return zoo.markdown(d["rows"], d["device"], d["size"])


def render(name: str, data: Path) -> str:
    """The markdown of section ``name`` from the JSON files in ``data``."""
    if name.startswith("zoo_") and name not in SECTIONS:
        if not (data / f"{name}.json").exists():
            raise KeyError(f"section {name!r}: no docs/data/{name}.json")
        return _zoo(data, name[4:])
    if name not in SECTIONS:
        raise KeyError(
            f"section {name!r} has markers but no renderer: add it to SECTIONS in "
            "benchmarks/docs_tables.py"
        )
    s = SECTIONS[name]
    return s.render(*(_load(data, f) for f in s.files))
