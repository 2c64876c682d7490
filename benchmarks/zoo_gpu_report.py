"""The GPU zoo's tables, targets and plot, from the JSON files of benchmarks/zoo_gpu.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: loss of a variant against torch.compile's (bf16 weights; recompute may fuse differently)
LOSS_RTOL = 2e-2
#: torch.compile timed again in a resumed run (``--again``): memopt's rows of that run are
#: compared with it, as their step times and the first baseline's come from other machines
AGAIN = "torch.compile again"
#: PyTorch's native activation offload as peers (kind: label; benchmarks/zoo_gpu.py runs
#: them, with benchmarks/native_offload.py)
PEER_LABELS = {
    "native": "native offload",
    "native_stream": "native offload, stream",
    "titan": "checkpoint+offload",
}
PEER_KINDS = tuple(PEER_LABELS)
#: memopt's peak may exceed a peer's by this much and still dominate it (allocator rounding)
PEAK_SLACK = 1.005
#: A step is host-bound when the host takes at least this share of the step to issue it.
HOST_BOUND = 0.8


def went_back(m: dict) -> bool:
    """The step's last plan measured over the budget and the step went back to an earlier plan
    measured inside it (memopt.step_fit): the row's plan is then the measured one, whatever
    the last planner said. Rows from before memopt's step record said so read its log."""
    if m.get("went_back_from") is not None:
        return True
    return any("went back to an earlier plan" in line for line in m.get("memopt_log") or ())


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _rows(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["variant"]: r for r in d["rows"]}


def _is_peer_budget(r: dict[str, Any]) -> bool:
    return r["kind"] == "budget" and isinstance(r.get("at"), str)


def _baselines(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per resumed row, the ``--again`` baseline of its run: the last one before it (rows are
    recorded in order, each resumed run's baseline first)."""
    out, again = {}, {}
    for r in d["rows"]:
        if r["variant"] == AGAIN:
            again = r
        elif r.get("resumed"):
            out[r["variant"]] = again
    return out


def compare(d: dict[str, Any], ab: str = "") -> dict[str, Any]:
    """Per torch point: torch's and memopt's peak and overhead and the issue's targets; per
    peer: its peak and overhead, memopt's at its peak, and whether memopt dominates it.
    ``ab``: memopt's points are the ``--ab`` rows of that tag (``"fused"``)."""
    rows = _rows(d)
    base = rows.get("torch.compile", {})
    if "ms" not in base:
        return {"base": base, "points": [], "others": [], "peers": []}
    agains = _baselines(d)

    def over(r):
        if "ms" not in r:
            return None
        again = agains.get(r["variant"], {})
        ref = again if "ms" in again and r.get("resumed") else base
        return r["ms"] / ref["ms"] - 1

    def kover(r):
        """Overhead in GPU kernel time (host-independent; rows that have it)."""
        again = agains.get(r.get("variant"), {})
        ref = again if "gpu_ms" in again and r.get("resumed") else base
        if "gpu_ms" not in r or "gpu_ms" not in ref:
            return None
        return r["gpu_ms"] / ref["gpu_ms"] - 1

    def loss_ok(r):
        if "loss" not in r:
            return None
        return abs(r["loss"] - base["loss"]) <= LOSS_RTOL * abs(base["loss"])

    points = []
    for r in d["rows"]:
        if r["kind"] != "torch":
            continue
        m = rows.get(f"memopt budget at torch {r['budget']}" + (f" [{ab}]" if ab else ""), {})
        p = {"budget": r["budget"], "torch": r, "memopt": m}
        # the plan that ran is inside the budget by the planner's word or by measurement
        p["kept"] = bool(m.get("feasible") or went_back(m))
        p["torch_over"], p["memopt_over"] = over(r), over(m)
        p["torch_kover"], p["memopt_kover"] = kover(r), kover(m)
        tk, mk = p["torch_kover"], p["memopt_kover"]
        p["kratio"] = mk / tk if tk and tk > 0 and mk is not None else None
        if "peak" in r and m.get("peak") is not None and r.get("peak") is not None:
            to, mo = p["torch_over"], p["memopt_over"]
            p["peak_ok"] = m["peak"] <= r["peak"]
            p["ratio"] = mo / to if to and to > 0 else None
            p["time_ok"] = mo <= 0.5 * to if to is not None else None
            p["honored"] = m["peak"] <= PEAK_SLACK * m["target"] if p["kept"] else None
            pred = m.get("predicted_peak")
            p["pred_err"] = pred / m["peak"] - 1 if pred else None
        p["loss_ok"] = loss_ok(m)
        points.append(p)
    peers = []
    last = {r["kind"]: r for r in d["rows"] if r["kind"] in PEER_KINDS}
    for r in sorted(last.values(), key=lambda r: PEER_KINDS.index(r["kind"])):
        m = rows.get(f"memopt budget at {r['variant']}", {})
        q = {"peer": r, "memopt": m, "peer_over": over(r), "memopt_over": over(m)}
        q["peer_loss_ok"], q["loss_ok"] = loss_ok(r), loss_ok(m)
        q["dominates"] = dominates(r, m)
        peers.append(q)
    others = [
        {**r, "over": over(r), "loss_ok": loss_ok(r)}
        for r in d["rows"]
        if (r["kind"] in ("level1", "offload") or "error" in r)
        and r["kind"] not in PEER_KINDS
        and not _is_peer_budget(r)
    ]
    return {"base": base, "points": points, "others": others, "peers": peers}


def dominates(peer: dict[str, Any], memopt: dict[str, Any]) -> dict[str, bool] | None:
    """Whether memopt's point is at least as good as the peer's on both axes: its peak within
    ``PEAK_SLACK`` of the peer's and its step no slower (None without both measured)."""
    if any(r.get("peak") is None or "ms" not in r for r in (peer, memopt)):
        return None
    return {
        "peak": memopt["peak"] <= PEAK_SLACK * peer["peak"],
        "time": memopt["ms"] <= peer["ms"],
    }


def dominance_cell(dom: dict[str, bool] | None) -> str:
    """``yes``, ``**no** (peak)``, ``**no** (time)``, ``**no** (peak, time)`` or ``-``."""
    if dom is None:
        return "-"
    missed = [k for k in ("peak", "time") if not dom[k]]
    return "yes" if not missed else f"**no** ({', '.join(missed)})"


def brief_error(text: str, width: int = 160) -> str:
    """An error's first line (benchmarks/zoo_gpu.py puts the exception there), or the last
    line naming an exception in a process's log tail."""
    lines = [x.strip() for x in str(text).splitlines() if x.strip()]
    if not lines:
        return "failed"
    first = lines[0]
    if first.endswith("raised:") and len(lines) > 1:  # torch's backend failure: the cause next
        first = f"{first} {lines[1]}"
    if first.startswith("exit ") or first.startswith("timeout"):
        named = [x for x in lines[1:] if "Error" in x.split(":")[0] or "Exception" in x]
        if named:
            first = f"{first.rstrip(':')}: {named[-1]}"
    return first[:width].replace("|", "\\|")


def _mark(ok: bool | None, text: str = "") -> str:
    return "-" if ok is None else ("met" if ok else f"**missed**{text}")


def model_table(d: dict[str, Any]) -> str:
    c = compare(d)
    base = c["base"]
    head = f"### {d['model']}\n\n"
    if "ms" not in base:
        return head + f"torch.compile failed: {base.get('error', 'not run')}\n"
    unit = base["unit"]
    kern = "gpu_ms" in base  # rows with GPU kernel time (from the thirteenth session)
    first = (
        head + f"torch.compile: peak {_gib(base['peak'])} GiB, {base['ms']:.1f} ms/step, "
        f"{base['per_s']:,.0f} {unit}/s, compile {base['compile_s']} s, loss {base['loss']:.4f}."
    )
    if kern:
        first += (
            f" GPU kernels {base['gpu_ms']:.1f} ms per step; the host issues a step in "
            f"{base['host_ms']:.1f} ms"
            + (
                " (host-bound: step times measure the host, which varies between processes; "
                "the kernel-time column does not)."
                if base["host_ms"] >= HOST_BOUND * base["ms"]
                else "."
            )
        )
    out = [
        first,
        "",
        "| torch budget | torch peak GiB | torch overhead | memopt peak GiB | memopt overhead "
        "| memopt / torch overhead | peak ≤ torch's, overhead ≤ ½ | memopt: feasible, honored "
        "| predicted peak (error) | loss |"
        + (" kernel-time overhead, torch / memopt (ratio) |" if kern else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if kern else ""),
    ]
    for p in c["points"]:
        t, m = p["torch"], p["memopt"]
        if "error" in m or "ms" not in m:
            err = m.get("error", "not run").splitlines()[0][:120]
            out.append(
                f"| {p['budget']} | {_gib(t.get('peak'))} | {_pct(p['torch_over'])} "
                f"| {err} | | | | | | |"
            )
            continue
        ratio = "-" if p.get("ratio") is None else f"{p['ratio']:.2f}"
        both = None if p.get("peak_ok") is None else p["peak_ok"] and bool(p.get("time_ok"))
        feas = "feasible" if m.get("feasible") else "**infeasible**"
        if p["kept"] and not m.get("feasible"):
            feas = "last plan over, went back to one measured inside"
        if p["kept"]:
            feas += ", " + ("honored" if p.get("honored") else "**over budget**")
        pred = m.get("predicted_peak")
        pe = "-" if pred is None else f"{_gib(pred)} ({_pct(p.get('pred_err'))})"
        out.append(
            f"| {p['budget']} | {_gib(t['peak'])} | {_pct(p['torch_over'])} | {_gib(m['peak'])} "
            f"| {_pct(p['memopt_over'])} | {ratio} | {_mark(both)} | {feas} | {pe} "
            f"| {_mark(p['loss_ok'], ' (differs)')} |" + (f" {_kernel_cell(p)} |" if kern else "")
        )
    for r in c["others"]:
        if "ms" in r:
            out.append(
                f"\n{r['variant']}"
                + (f" (k={r['k']})" if "k" in r else "")
                + f": peak {_gib(r['peak'])} GiB, overhead {_pct(r['over'])}, "
                f"offloaded {_gib(r.get('offloaded_bytes'))} GiB, loss "
                + ("close" if r["loss_ok"] else "**differs**")
                + "."
            )
        else:
            out.append(f"\n{r['variant']}: failed: `{r['error'].splitlines()[0][:200]}`")
    if c["peers"]:
        mb = {q["peer"].get("min_bytes") for q in c["peers"]} - {None}
        size = f" ≥ {min(mb) / 2**20:g} MiB" if mb else ""
        out.append(
            f"\nPyTorch's native activation offload: saved tensors{size} tagged, offloaded "
            "where torch can (no views or getitems); memopt's budget at each peer's peak "
            f"dominates it at ≤ {PEAK_SLACK:g} x its peak and no more step time."
        )
        out += ["", *peer_table(c["peers"])]
    return "\n".join(out) + "\n"


def _kernel_cell(p: dict[str, Any]) -> str:
    """``torch% / memopt% (ratio)`` in GPU kernel time."""
    if p.get("torch_kover") is None or p.get("memopt_kover") is None:
        return "-"
    ratio = "" if p.get("kratio") is None else f" ({p['kratio']:.2f})"
    return f"{_pct(p['torch_kover'])} / {_pct(p['memopt_kover'])}{ratio}"


def _native(r: dict[str, Any]) -> str:
    """What a peer tagged and what torch offloaded of it: ``n (GiB) / n (GiB)``."""
    n = r.get("native") or {}
    if "tagged" not in n:
        return "-"
    off = "-" if n.get("offloaded") is None else f"{n['offloaded']} ({_gib(n['offloaded_bytes'])})"
    return f"{n['tagged']} ({_gib(n['tagged_bytes'])}) / {off}"


def _loss_pair(q: dict[str, Any]) -> str:
    def one(ok):
        return "-" if ok is None else ("close" if ok else "**differs**")

    return f"{one(q['peer_loss_ok'])} / {one(q['loss_ok'])}"


def peer_table(peers: list[dict[str, Any]]) -> list[str]:
    """PyTorch's native activation offload (benchmarks/native_offload.py) against memopt's
    budget at each peer's measured peak; failed peers with their error."""
    out = [
        "| peer | peer peak GiB | peer overhead | tagged / offloaded (GiB) | memopt peak GiB "
        "| memopt overhead | memopt dominates | loss (peer / memopt) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for q in peers:
        r, m = q["peer"], q["memopt"]
        if "ms" not in r:
            err = brief_error(r.get("error", "not run"))
            out.append(f"| {r['variant']} | failed: `{err}` | | | | | | |")
            continue
        head = f"| {r['variant']} | {_gib(r.get('peak'))} | {_pct(q['peer_over'])} | {_native(r)} "
        if "ms" not in m:
            err = brief_error(m.get("error", "not run"))
            out.append(head + f"| memopt: `{err}` | | | {_loss_pair(q)} |")
            continue
        out.append(
            head + f"| {_gib(m.get('peak'))} | {_pct(q['memopt_over'])} "
            f"| {dominance_cell(q['dominates'])} | {_loss_pair(q)} |"
        )
    return out


def peer_summary(docs: list[dict[str, Any]]) -> str:
    """Per model and peer: does memopt at the peer's peak dominate it (``peer failed``: the
    peer has no measured point; ``-``: not run)."""
    out = [
        "| model | "
        + " | ".join(f"memopt dominates {label}" for label in PEER_LABELS.values())
        + " |",
        "|---|" + "---|" * len(PEER_LABELS),
    ]
    for d in docs:
        by_kind = {q["peer"]["kind"]: q for q in compare(d)["peers"]}
        cells = []
        for kind in PEER_KINDS:
            q = by_kind.get(kind)
            if q is None:
                cells.append("-")
            elif "ms" not in q["peer"]:
                cells.append("peer failed")
            else:
                cells.append(dominance_cell(q["dominates"]))
        out.append(f"| {d['model']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def summary_table(docs: list[dict[str, Any]]) -> str:
    kern = any("gpu_ms" in compare(d)["base"] for d in docs)
    out = [
        "| model | torch points where memopt's peak ≤ torch's and overhead ≤ ½ "
        "| memopt / torch overhead | feasible budgets honored (+0.5%) "
        "| predicted peak vs measured |"
        + (" memopt / torch overhead in kernel time |" if kern else ""),
        "|---|---|---|---|---|" + ("---|" if kern else ""),
    ]
    for d in docs:
        ps = [p for p in compare(d)["points"] if p.get("peak_ok") is not None]
        if not ps:
            out.append(f"| {d['model']} | no data | | | |")
            continue
        met = sum(bool(p["peak_ok"] and p["time_ok"]) for p in ps)
        ratios = [f"{p['ratio']:.2f}" if p.get("ratio") is not None else "-" for p in ps]
        feas = [p for p in ps if p["kept"]]
        hon = sum(bool(p["honored"]) for p in feas)
        errs = [p["pred_err"] for p in ps if p.get("pred_err") is not None]
        rng = f"{_pct(min(errs))} .. {_pct(max(errs))}" if errs else "-"
        kr = [f"{p['kratio']:.2f}" if p.get("kratio") is not None else "-" for p in ps]
        out.append(
            f"| {d['model']} | {met} of {len(ps)} | {' / '.join(ratios)} "
            f"| {hon} of {len(feas)} | {rng} |" + (f" {' / '.join(kr)} |" if kern else "")
        )
    return "\n".join(out) + "\n"


def plot(docs: list[dict[str, Any]], png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(docs))
    rows_n = (len(docs) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.6 * rows_n), squeeze=False)
    for ax, d in zip(axes.flat, docs):
        c = compare(d)
        ax.set_title(f"{d['model']}", fontsize=9)
        pts = [p for p in c["points"] if p.get("peak_ok") is not None]
        for key, style, label in (
            ("torch", "o-", "torch budget"),
            ("memopt", "s-", "memopt at torch's peak"),
        ):
            xs = [p[key]["peak"] / 2**30 for p in pts]
            ys = [100 * p[f"{key}_over"] for p in pts]
            ax.plot(xs, ys, style, ms=4, label=label)
            if key == "torch":
                for x, y, p in zip(xs, ys, pts):
                    ax.annotate(str(p["budget"]), (x, y), fontsize=6)
        base = c["base"]
        if "peak" in base and base["peak"] is not None:
            ax.plot([base["peak"] / 2**30], [0], "k*", label="torch.compile")
        for r, style in zip(c["others"], ("^", "v")):
            if r.get("peak") is not None:
                ax.plot([r["peak"] / 2**30], [100 * r["over"]], style, label=r["variant"])
        for q, style in zip(c["peers"], ("x", "1", "+")):
            for key, marker, name in (("peer", style, "{}"), ("memopt", "D", "memopt at {}")):
                r = q[key]
                if r.get("peak") is not None and q[f"{key}_over"] is not None:
                    x, y = r["peak"] / 2**30, 100 * q[f"{key}_over"]
                    ax.plot([x], [y], marker, ms=5, label=name.format(q["peer"]["variant"]))
        ax.set_xlabel("peak GiB", fontsize=8)
        ax.set_ylabel("overhead vs torch.compile (%)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=5)
    for ax in list(axes.flat)[len(docs) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def markdown(docs: list[dict[str, Any]], suffix: str = "") -> str:
    """The GPU section of docs/zoo.md (between ``<!-- zoo gpu -->`` markers): the summary and
    each model's table (benchmarks/docs_numbers.py checks it against docs/data). ``suffix``:
    the run's file-name suffix (``zoo_gpu_<model><suffix>.json``)."""
    d0 = docs[0]
    files = ", ".join(f"`docs/data/zoo_gpu_{d['model']}{suffix}.json`" for d in docs)
    return (
        f"Device {d0['device']}, torch {d0['torch']}, {d0['dtype']} weights, size {d0['size']}; "
        f"median of the timed steps; raw JSON: {files}.\n\n"
        + summary_table(docs)
        + "\n"
        + (peer_summary(docs) + "\n" if any(compare(d)["peers"] for d in docs) else "")
        + "\n".join(model_table(d) for d in docs)
    )


def write_docs(paths: list[str], png: str, markdown_path: str) -> None:
    from benchmarks.zoo import write_table

    docs = [json.load(open(p)) for p in paths]
    text = markdown(docs)
    write_table(Path(markdown_path), text, "gpu")
    plot(docs, png)
    print(text)


def ab_rows(*docs: dict[str, Any]) -> str:
    """Every memopt budget row of ``docs`` beside its ``--ab`` copies (``[tag]`` labels): its
    peak against the budget, kernel-time overhead against its own run's baseline (``torch
    compile again`` for resumed rows), compile time and what ``fusion_guard="auto"`` decided
    (its log lines), with the commit of the run. Of a resumed run's file (``--again``) only the
    rows that run added."""
    out = [
        "| model | row | commit | peak GiB | vs budget | kernel-time overhead | compile s "
        "| the guard (auto) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        rows, agains = _rows(d), _baselines(d)
        base = rows.get("torch.compile", {})
        resumed = AGAIN in rows
        for r in d["rows"]:
            if r["kind"] != "budget" or "peak" not in r or (resumed and not r.get("resumed")):
                continue
            again = agains.get(r["variant"], {})
            ref = again if r.get("resumed") and "gpu_ms" in again else base
            kover = r["gpu_ms"] / ref["gpu_ms"] - 1 if "gpu_ms" in r and "gpu_ms" in ref else None
            said = [x for x in r.get("memopt_log", []) if "with the fusion guard" in x]
            guard = ", ".join(x.rsplit(": ", 1)[-1] for x in said) if said else "-"
            out.append(
                f"| {d['model']} | {r['label']} | {d.get('memopt_commit') or '-'} "
                f"| {r['peak'] / 2**30:.3f} | {r['peak'] / r['target'] - 1:+.2%} "
                f"| {'-' if kover is None else f'{kover:+.1%}'} | {r.get('compile_s', '-')} "
                f"| {guard} |"
            )
    return "\n".join(out) + "\n"
