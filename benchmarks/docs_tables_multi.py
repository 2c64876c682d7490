"""docs/benchmarks.md's two-GPU tables, rendered from benchmarks/multi_gpu.py JSON (and
benchmarks/diag_pcie.py's copy rates). Verdicts are computed here from the data."""

from __future__ import annotations

from benchmarks.docs_fmt import GiB, table

_LABELS = {
    "compile": "torch.compile",
    "torch0.5": "torch.compile, `activation_memory_budget` 0.5",
    "torch0.1": "torch.compile, `activation_memory_budget` 0.1",
    "level1": "memopt level 1",
    "memopt@0.5": "memopt `budget=` torch 0.5's peak",
    "memopt@0.1": "memopt `budget=` torch 0.1's peak",
    "auto@0.5": 'memopt `budget=` torch 0.5\'s peak, `offload_layers="auto"`',
    "auto@0.1": 'memopt `budget=` torch 0.1\'s peak, `offload_layers="auto"`',
    "fused": "memopt `fuse_loss=True` (the fused loss alone)",
    "unfused@0.5": "memopt `budget=` torch 0.5's peak, `fuse_loss=False`",
    "unfused@0.1": "memopt `budget=` torch 0.1's peak, `fuse_loss=False`",
    "offload1": "memopt `offload_layers=1`",
    "offload2": "memopt `offload_layers=2`",
    "compile_end": "torch.compile, again after the others",
}
_TORCH_POINT = {
    f"{kind}@{p}": f"torch{p}" for kind in ("memopt", "auto", "unfused") for p in ("0.5", "0.1")
}
#: issue 14's FSDP2 step runs (docs/data/multi_gpu_steps_w1_<tag>.json); those with the kernels'
#: own time per phase also get a phase table (section multi_gpu_phases_w1_<tag>)
FSDP_STEP_TAGS = "s29 s30a s30b s30c s31 s31b s31c s45 s53 s61 s62a s62b s62f s63a s63b s65a s66a"
FSDP_STEP_TAGS += " s67a s67b s67c"
FSDP_PHASE_TAGS = "s67a s67b s67c"


def fsdp_sections(section: type) -> dict:
    """The docs sections of issue 14's FSDP2 step runs, session after session."""
    out = {}
    for t in FSDP_STEP_TAGS.split():
        out[f"multi_gpu_steps_w1_{t}"] = section((f"multi_gpu_steps_w1_{t}.json",), steps_ratio)
    for t in FSDP_PHASE_TAGS.split():
        out[f"multi_gpu_phases_w1_{t}"] = section((f"multi_gpu_steps_w1_{t}.json",), phases)
    return out


def _rows(d: dict) -> dict[str, dict]:
    return {r["key"]: r for r in d["rows"] if "error" not in r}


def _spread(r: dict) -> str:
    t = r.get("step_ms") or []
    return f"{min(t):.1f}–{max(t):.1f}" if t else ""


def _peak(r: dict, point: dict | None, nd: int) -> str:
    """A row's peak (GiB), with how it stands against torch's at the same point."""
    text = f"{r['peak'] / GiB:.{nd}f}"
    if point is None:
        return text
    over = 100 * (r["peak"] / point["peak"] - 1)
    return text + (" ≤ torch's" if over <= 0 else f" (**{over:+.2f}%** over torch's)")


def _same(r: dict) -> str:
    return {True: "yes", False: "**no**"}.get(r.get("same_plan_on_ranks"), "")


def steps(w2: dict, w1: dict) -> str:
    """World 2 against world 1 (batch 4 per rank each): step time, spread, tokens/s, scaling,
    per-rank peak against torch's at the same point, whether the ranks' plans agree."""
    a, b = _rows(w2), _rows(w1)
    out = []
    for key, label in _LABELS.items():
        r, one = a.get(key), b.get(key)
        if r is None:
            continue
        base2, base1 = a["compile"]["ms"], b["compile"]["ms"]
        out.append(
            [
                label,
                f"{r['ms']:.1f}",
                _spread(r),
                f"{100 * (r['ms'] / base2 - 1):+.1f}%",
                f"{one['ms']:.1f} ({100 * (one['ms'] / base1 - 1):+.1f}%)" if one else "",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['tokens_per_s'] / one['tokens_per_s']:.2f}×" if one else "",
                _peak(r, a.get(_TORCH_POINT.get(key, "")), 2),
                f"{one['peak'] / GiB:.2f}" if one else "",
                _same(r),
            ]
        )
    head = [
        "variant (FSDP2, 8-layer Llama)",
        "world 2: step ms (median)",
        "range",
        "vs compile",
        "world 1: step ms (vs compile)",
        "world 2: tokens/s",
        "scaling",
        "world 2: peak GiB per rank",
        "world 1: peak GiB",
        "same plan on both ranks",
    ]
    return table(head, out)


def _points(a: dict[str, dict]):
    """Each row present, in table order: its key, label, row and torch's row at its point."""
    for key, label in _LABELS.items():
        if key in a:
            yield key, label, a[key], a.get(_TORCH_POINT.get(key, ""))


def steps_repeat(d: dict) -> str:
    """A world-2 run read point by point: median, range, memopt against torch at the same
    point directly (the compile baseline's own spread is in its row)."""
    out = []
    for _key, label, r, point in _points(_rows(d)):
        vs = f"{100 * (r['ms'] / point['ms'] - 1):+.1f}%" if point else ""
        out.append([label, f"{r['ms']:.1f}", _spread(r), vs, _peak(r, point, 3), _same(r)])
    n = d["config"]["iters"]
    head = ["variant", f"step ms (median of {n})", "range", "vs torch at that point", "peak GiB",
            "same plan on both ranks"]  # fmt: skip
    return table(head, out)


def steps_ratio(d: dict) -> str:
    """One run read against issue 14's target: each row's time over torch.compile's (the mean
    of its first and its last row) and, at torch's points, that over torch's own (the target:
    at most 0.5), with the peak against torch's; the ranks' agreement only at world > 1."""
    import statistics

    a = _rows(d)
    base = statistics.fmean(a[k]["ms"] for k in ("compile", "compile_end") if k in a)
    out = []
    for _key, label, r, point in _points(a):
        ratio = f"{(r['ms'] - base) / (point['ms'] - base):.2f}" if point else ""
        row = [label, f"{r['ms']:.1f}", _spread(r), f"{100 * (r['ms'] / base - 1):+.1f}%", ratio,
               _peak(r, point, 3)]  # fmt: skip
        out.append(row + ([_same(r)] if d.get("world", 1) > 1 else []))
    head = ["variant", f"step ms (median of {d['config']['iters']})", "range",
            "over torch.compile", "of torch's overhead at that point", "peak GiB"]  # fmt: skip
    return table(head + (["same plan on every rank"] if d.get("world", 1) > 1 else []), out)


def phases(d: dict) -> str:
    """Per row, the medians of its timed steps' GPU time per phase (CUDA events: the kernels
    and the GPU's idle time between them) and, where measured, the kernels' own time per phase
    (``torch.profiler``, a few more steps); both against torch.compile's first row."""
    import statistics

    a, out = _rows(d), []
    base = a["compile"]["phases_by_rank"][0]
    for _key, label, r, _point in _points(a):
        ph = r["phases_by_rank"][0]
        ev = {k: statistics.median(v) for k, v in ph["gpu_ms"].items()}
        k = dict(ph.get("kernel_ms") or {})
        if not k.get("ranges_apart"):  # s67c: its total counted the ranges' spans as kernels
            k.pop("bwd", None)
        row = [label] + [f"{ev[p]:.2f}" for p in ("fwd", "bwd", "opt")]
        row += [f"{k[p]:.2f}" if p in k else "" for p in ("fwd", "bwd", "opt")]
        bk = base.get("kernel_ms") or {}
        idle = None  # the forward's event span less its kernels, against torch.compile's
        if "fwd" in k and "fwd" in bk:
            idle = ev["fwd"] - k["fwd"] - (statistics.median(base["gpu_ms"]["fwd"]) - bk["fwd"])
        out.append(row + [f"{idle:+.2f}" if idle is not None else ""])
    head = ["variant", "forward ms (events)", "backward", "optimizer", "forward ms (kernels)",
            "backward", "optimizer", "forward idle vs torch.compile's"]  # fmt: skip
    return table(head, out)


def losses(w2: dict, w1_b8: dict) -> str:
    """World 2 × batch 4 per rank against world 1 × batch 8: the same global batch."""
    a, b = _rows(w2), _rows(w1_b8)
    out = []
    for key, label in _LABELS.items():
        if key not in a or key not in b:
            continue
        x, y = a[key]["losses"], b[key]["losses"]
        diff = max(abs(u - v) for u, v in zip(x, y))
        out.append([label, ", ".join(f"{v:.4f}" for v in x), ", ".join(f"{v:.4f}" for v in y),
                    f"{diff:.2g}"])  # fmt: skip
    head = ["variant", "world 2 × 4 rows", "world 1 × 8 rows", "largest difference"]
    return table(head, out)


def _results(*docs: dict) -> list[dict]:
    return [r for d in docs for r in d["results"]]


def params(w2: dict, w2_largest: dict, w1: dict, w1_b4: dict) -> str:
    """Parameter offload at world 2 against world 1, each job its own torchrun; per-step
    median and range (this host's step times spread widely), host bytes per rank."""
    one = {(r["name"], r["bs"], r["seq"]): r for r in _results(w1, w1_b4) if "error" not in r}
    out = []
    for r in _results(w2, w2_largest):
        shape = f"{r['bs']} × {r['seq']}"
        if "error" in r:
            what = "out of memory" if r["error"] == "OOM" else "failed"
            out.append([r["name"], shape, what, "", "", "", "", "", "", ""])
            continue
        ref = one.get((r["name"], r["bs"], r["seq"]))
        times = [max(ts) for ts in zip(*(x["times"] for x in r["ranks"]))][3:]
        rng = f"{min(times):.2f}–{max(times):.2f}"
        pinned = sum(x["host_pinned_bytes"] for x in r["ranks"])
        pageable = sum(x["host_pageable_bytes"] for x in r["ranks"])
        one_host = ""
        if ref is not None:
            one_host = (
                f"{(ref['host_pinned_bytes_sum'] + ref['host_pageable_bytes_sum']) / GiB:.2f}"
            )
        out.append(
            [
                r["name"],
                shape,
                f"{r['s_per_step']:.3f} ({rng})",
                f"{ref['s_per_step']:.3f}" if ref else "",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}×" if ref else "",
                f"{r['peak_gib']:.2f}",
                f"{pinned / 2 / GiB:.2f} + {pageable / 2 / GiB:.2f}",
                f"{(pinned + pageable) / GiB:.2f}",
                one_host,
            ]
        )
    head = [
        "variant",
        "batch per rank",
        "world 2: s/step (range)",
        "world 1: s/step",
        "world 2: tokens/s",
        "scaling",
        "GPU peak GiB per rank",
        "host pinned + pageable GiB per rank",
        "host GiB, both ranks",
        "host GiB, world 1",
    ]
    return table(head, out)


def pcie(d: dict) -> str:
    out = []
    for r in d["ranks"]:
        a, t = r["alone"], r["together"]
        out.append([f"GPU {r['rank']}", f"{a['d2h']:.1f}", f"{t['d2h']:.1f}", f"{a['h2d']:.1f}",
                    f"{t['h2d']:.1f}"])  # fmt: skip
    head = ["", "GPU→host alone GB/s", "both at once", "host→GPU alone GB/s", "both at once"]
    return table(head, out)
