"""Numbers in the docs' prose, checked against docs/data like the generated tables.

A measured number typed in a sentence is wrapped in an inline marker that markdown does not
show::

    at <!-- n:fsdp:s8:k1:over -->-1.2%<!-- /n --> step time

The key is ``NAME:ARG:ARG...``: ``VALUES[NAME]`` is called with the arguments (strings) and
returns the text; ``benchmarks/docs_numbers.py`` writes it between the markers and ``--check``
fails when the text differs. Arguments name a data file by its alias in ``FILES`` and, for
the FSDP2 step files, a row by its alias (:func:`row`). Every value is derived from the JSON
as the tables are (``benchmarks/docs_fmt.py``), so a re-measurement rewrites the prose too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

from benchmarks.docs_fmt import GiB, gib, pct, size
from benchmarks.zoo_gpu_report import compare

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"

#: ``<!-- n:KEY -->TEXT<!-- /n -->`` (KEY: no spaces; TEXT: one line); not after a backtick,
#: so the docs can show the marker in inline code.
MARKER = re.compile(r"(?<!`)<!-- n:(?P<key>[^\s>]+) -->(?P<text>[^\n]*?)<!-- /n -->")

#: Short names of the data files the prose cites.
FILES = {
    "s8": "fsdp_step_2026-11-25_s8.json",
    "s8ab": "fsdp_step_2026-11-25_s8_ab.json",
    "s8b": "fsdp_step_2026-11-25_s8_budgets.json",
    "per_run": "fsdp_step_2026-11-25_per_run.json",
    "per_region": "fsdp_step_2026-11-25.json",
    "warmup9": "fsdp_step_2026-11-25_budgets_warmup9.json",
    "cli": "cli_timings.json",
    "p24": "param_peers_2026-11-24.json",
    "p24pip": "param_peers_pipelined_2026-11-24.json",
    "p25": "param_peers_2026-11-25.json",
    "batching": "param_peers_batching_2026-11-25.json",
    "repeat": "param_peers_repeat_2026-11-25.json",
    "adamw25": "param_cpu_adamw_2026-11-25.json",
    "s9": "fsdp_step_2026-11-25_s9.json",
    "s9r": "fsdp_step_2026-11-25_s9_reuse.json",
    "p9": "param_peers_2026-11-25_s9.json",
    "p9auto": "param_peers_2026-11-25_s9_auto.json",
    "ci": "ci_run.json",
    "first_hour": "first_hour.json",
    "pareto_llama": "pareto_llama.json",
    "pareto_v2": "pareto_llama_memopt_v2.json",
    "pareto_v5": "pareto_llama_v5.json",
    "copies": "copy_interference.json",
    "lb_v2": "largest_batch_v2_default_alloc.json",
    "lb_exp": "largest_batch_expandable.json",
    "llama8_v4": "offload_llama8_v4.json",
    "gpt6_v2": "offload_gpt6_v2.json",
    "mg1": "multi_gpu_steps_w1_2026-11-25.json",
    "mg2": "multi_gpu_steps_w2_2026-11-25.json",
    "mg2r": "multi_gpu_steps_w2_warmup9_2026-11-25.json",
    "mg1b8": "multi_gpu_steps_w1_b8_2026-11-25.json",
    "pcie2": "pcie_w2_2026-11-25.json",
    "adamw24": "param_cpu_adamw_2026-11-24.json",
    "lb_v3": "largest_batch_v3.json",
    "freeze": "freeze_check.json",
    "pt1": "plan_time_llama.json",
    "pt2": "plan_time_llama_v2.json",
    "llama8_v3": "offload_llama8_v3.json",
    "llama8_k12": "offload_llama8_k12.json",
    "llama8": "offload_llama8.json",
    "gpt6": "offload_gpt6.json",
    "llama4": "offload_llama.json",
}
#: The three param_peers.py runs of 2026-11-25 (one model, three machines).
PEER_RUNS = ("p25", "batching", "repeat")
#: The GPU zoo models docs/zoo.md's summary bullets count (the eighth session's run; DiT, run
#: in the ninth, is described beside them).
ZOO = ("qwen2", "bert", "vit", "resnet", "whisper")


@cache
def load(name: str) -> dict:
    return json.loads((DATA / FILES.get(name, name)).read_text())


def row(name: str, alias: str) -> dict:
    """A row of an fsdp_step.py file: ``compile``, ``eager``, ``l1`` (level 1), ``t0.5``
    (torch's budget 0.5), ``b0.5`` (memopt's budget at torch 0.5's peak; ``b0.5n``: its no
    offload variant), ``b0.6`` (``budget=0.6``), ``k1`` (``offload_layers=1``)."""
    rows = load(name)["rows"]
    fixed = {"compile": "torch.compile", "eager": "eager FSDP2", "l1": "memopt level=1"}
    if alias in fixed:
        want = fixed[alias]
    elif alias.startswith("t"):
        want = f"torch.compile budget={alias[1:]}"
    elif alias.startswith("k"):
        want = f"memopt offload_layers={alias[1:]}"
    elif alias.startswith("b") and alias[1:] == "0.6":
        want = "memopt budget=0.6"
    elif alias.startswith("b"):
        point, no = alias[1:].removesuffix("n"), alias.endswith("n")
        want = next(
            r["variant"]
            for r in rows
            if r["variant"].endswith(f"(torch {point})" + (", no offload" if no else ""))
        )
    else:
        raise KeyError(f"no row alias {alias!r} (see docs_prose.row)")
    return next(r for r in rows if r["variant"] == want)


def _over(name: str, alias: str) -> float:
    return 100 * (row(name, alias)["ms"] / row(name, "compile")["ms"] - 1)


def fsdp(name: str, alias: str, field: str) -> str:
    """One number of a row: ``ms`` (1 decimal), ``ms2`` (2), ``over`` (step time against
    torch.compile, signed), ``peak``/``pred``/``target``/``moved`` (GiB: measured peak,
    predicted step peak, budget, the step's target after its reserve, bytes offloaded), ``movedGB`` (GB), ``movedMB`` (MB),
    ``overbudget`` (peak over the budget, %, 2 decimals, unsigned), ``kept`` (share of the
    saved bytes kept, %), ``savedGB``/``beforeGB`` (saved bytes after/before, GB)."""
    r = row(name, alias)
    out = {
        "ms": lambda: f"{r['ms']:.1f}",
        "ms2": lambda: f"{r['ms']:.2f}",
        "over": lambda: pct(r["ms"], row(name, "compile")["ms"]),
        "peak": lambda: gib(r["peak"]),
        "pred": lambda: gib(r["predicted_step_peak"]),
        "target": lambda: gib(r["target"]),
        "steptarget": lambda: gib(r["step_target"]),
        "moved": lambda: gib(r["offloaded_bytes"]),
        "movedGB": lambda: f"{r['offloaded_bytes'] / 1e9:.2f}",
        "movedMB": lambda: f"{r['offloaded_bytes'] / 1e6:.0f}",
        "overbudget": lambda: f"{abs(100 * (r['peak'] / r['target'] - 1)):.2f}%",
        "kept": lambda: f"{100 * r['saved_after'] / r['saved_before']:.0f}%",
        "savedGB": lambda: f"{r['saved_after'] / 1e9:.2f}",
        "beforeGB": lambda: f"{r['saved_before'] / 1e9:.2f}",
        "regions": lambda: str(r["regions"]),
        "runs": lambda: runs(r["sequence"]),
        "noff": lambda: str(len(r["offload_runs"])),
        "offlayers": lambda: _layers(r["offload_runs"]),
    }
    if field not in out:
        raise KeyError(f"no field {field!r} (see docs_prose.fsdp)")
    return out[field]()


def runs(seq: list[int]) -> str:
    """A step's sequence of runs in inline code, repeats folded: ``[0]*8 + [1, 2]``."""
    parts: list[str] = []
    loose: list[int] = []
    i = 0
    while i < len(seq):
        j = i
        while j < len(seq) and seq[j] == seq[i]:
            j += 1
        if j - i >= 3:
            if loose:
                parts.append(str(loose))
                loose = []
            parts.append(f"[{seq[i]}]*{j - i}")
        else:
            loose += seq[i:j]
        i = j
    if loose:
        parts.append(str(loose))
    return "`" + " + ".join(parts) + "`"


def _layers(ks: list[int]) -> str:
    if len(ks) == 1:
        return f"layer {ks[0]}"
    if ks == list(range(ks[0], ks[-1] + 1)):
        return f"layers {ks[0]}–{ks[-1]}"
    return "layers " + ", ".join(map(str, ks))


def fsdp_vs(name: str, alias: str, other: str, what: str) -> str:
    """Two rows: ``share`` (this row's overhead over the other's, 2 decimals), ``peakpct``
    (this peak over the other's, %, 1 decimal, unsigned), ``peakdiff`` (GiB between the
    peaks), ``predgap`` (this measured peak minus the other's predicted step peak, GiB),
    ``excessGB`` (how much further this row's measured peak is above its predicted step peak
    than the other row's, GB) and ``excessshare`` (that, as a share of this row's offloaded
    bytes, whole %)."""
    a, b = row(name, alias), row(name, other)

    def excess() -> float:
        return (a["peak"] - a["predicted_step_peak"]) - (b["peak"] - b["predicted_step_peak"])

    out = {
        "excessGB": lambda: f"{excess() / 1e9:.2f}",
        "excessshare": lambda: f"{100 * excess() / a['offloaded_bytes']:.0f}%",
        "share": lambda: f"{_over(name, alias) / _over(name, other):.2f}",
        "peakpct": lambda: f"{abs(100 * (a['peak'] / b['peak'] - 1)):.1f}%",
        "peakdiff": lambda: gib(abs(a["peak"] - b["peak"])),
        "predgap": lambda: gib(a["peak"] - b["predicted_step_peak"]),
    }
    return out[what]()


def losses(name: str, which: str) -> str:
    """``min`` / ``max`` of the last recorded loss over every row."""
    last = [r["losses"][-1] for r in load(name)["rows"]]
    return f"{(min if which == 'min' else max)(last):.4f}"


def cli(index: str, field: str, *args: str) -> str:
    """``docs_cpu.py cli`` rows: ``wall`` (s) or ``rss`` (GiB) of row ``index``;
    ``phase:NAME`` (CPU seconds of a phase of ``--progress``'s closing line, e.g. ``tracing``);
    ``fit:none|level1|planner`` (``memopt fit``'s largest batch per strategy); from the
    recorded output ``peak:optimizer`` (optimizer states, GiB), ``peak:left`` (the command's
    ``--budget`` GiB less those states, GiB), ``peak:smallest`` / ``peak:floor`` (an infeasible
    budget's smallest peak found / the peak floor, GiB)."""
    r = load("cli")["rows"][int(index)]
    if field == "wall":
        return f"{r['wall_s']:.0f}"
    if field == "rss":
        return f"{r['max_rss_kib'] * 1024 / GiB:.2f}"
    if field == "phase":
        return f"{_phase(r, args[0]):.1f}"
    out = "\n".join(r["stdout_tail"])
    if field == "fit":
        label = {"none": r"none \(level 0\)", "level1": "level 1", "planner": "planner"}[args[0]]
        return _found(rf"^{label}\s+(\d+)\s", out)
    if field == "peak":
        states = _found(r"^\s*optimizer states\s+\S+ GiB\s+=\s+(\d+)", out)
        if args[0] == "optimizer":
            return f"{int(states) / GiB:.2f}"
        if args[0] == "left":
            budget = float(_found(r"--budget (\d+(?:\.\d+)?)GiB", r["command"]))
            return f"{budget - int(states) / GiB:.2f}"
        pattern = {
            "smallest": r"smallest peak found ([\d.]+) GiB",
            "floor": r"no plan has a peak below ([\d.]+) GiB",
        }
        return _found(pattern[args[0]], out)
    raise KeyError(f"no cli field {field!r} (see docs_prose.cli)")


def _phase(r: dict, name: str) -> float:
    return float(_found(rf"(?:^|, ){name} ([\d.]+) s", r["cpu_phases"]))


def _found(pattern: str, text: str) -> str:
    m = re.search(pattern, text, re.M)
    if m is None:
        raise KeyError(f"{pattern!r} not in the recorded output")
    return m.group(1)


def cli_ratio(a: str, b: str, phase: str) -> str:
    """CPU seconds of phase ``phase`` of ``docs_cpu.py cli`` row ``a`` over row ``b``'s."""
    rows = load("cli")["rows"]
    return f"{_phase(rows[int(a)], phase) / _phase(rows[int(b)], phase):.1f}"


def pareto(name: str, what: str) -> str:
    """A ``pareto.py`` run: ``unopt`` (torch.compile's measured peak above the planner's
    prediction of the unoptimized step, %), ``under`` (memopt's measured budget peaks above
    their predictions, range, %), ``over`` (the budget plans whose peak ended above their
    target, and by how much, MiB), ``excess`` (measured step-time overhead above the predicted
    one per offloaded GiB, range, ms)."""
    d = load(name)
    rows = d["rows"]
    base = next(r for r in rows if r["variant"] == "torch.compile")
    plans = [r for r in rows if "predicted_peaks" in r]
    if what == "unopt":
        unopt = next(r for r in rows if "planner" in r)["planner"][0]["baseline_peak"]
        return f"{100 * (base['peak'] / unopt - 1):.1f}%"
    if what == "under":
        errs = sorted(100 * (r["peak"] / r["predicted_peaks"][0] - 1) for r in plans)
        return _range([f"{e:.1f}" for e in errs], what, "–") + "%"
    if what == "over":
        over = sorted(
            (r["peak"] - r["target"]) / (1 << 20) for r in plans if r["peak"] > r["target"]
        )
        if not over:
            return "no plan"
        if len(over) == 1:
            return f"1 plan {over[0]:.1f} MiB"
        return f"{len(over)} plans up to {over[-1]:.1f} MiB"
    if what == "excess":
        per = []
        for r in rows:
            pl = (r.get("planner") or [{}])[0]
            if pl.get("saved_bytes_offloaded"):
                extra = r["ms"] - base["ms"] - 1e3 * pl["predicted_overhead_s"]
                per.append(extra / (pl["saved_bytes_offloaded"] / GiB))
        return _range([f"{x:.1f}" for x in sorted(per)], what, "–")
    raise KeyError(f"no pareto value {what!r} (see docs_prose.pareto)")


def copies(work: str, direction: str) -> str:
    """``copy_interference.py``: how much slower workload ``work`` (``llama``: a compiled
    8-layer Llama step, ``hbm``: a device copy loop, ``matmul``) ran under continuous copies
    (``d2h``, ``h2d``, ``both``), over the chunk sizes run, %."""
    what = {"llama": "llama step", "hbm": "hbm copy", "matmul": "matmul"}[work]
    vals = sorted(
        100 * r[direction]["slowdown"] for r in load("copies")["rows"] if r["what"] == what
    )
    if vals[0] >= 0:
        return _range([f"{v:.1f}" for v in vals], "copies", "–") + "%"
    return _range([f"{v:+.1f}%" for v in vals], "copies", " to ")


def batch(name: str, variant: str, what: str, *args: str) -> str:
    """``largest_batch.py``: ``largest`` (the largest batch that trained), ``oom:BATCH:alloc``
    / ``oom:BATCH:free`` (at an out-of-memory trial: GiB allocated by PyTorch / reserved but
    unallocated, from torch's message)."""
    v = load(name)["variants"][variant]
    if what == "largest":
        return str(v["largest"])
    if what == "oom":
        t = next(t for t in v["trials"] if t["batch"] == int(args[0]) and not t["ok"])
        m = re.search(
            r"([\d.]+) GiB is allocated by PyTorch, and ([\d.]+) GiB is reserved", t["error"]
        )
        if m is None:
            raise KeyError(f"batch {args[0]}: no allocator figures in the error")
        return m.group(1 if args[1] == "alloc" else 2)
    raise KeyError(f"no batch value {what!r} (see docs_prose.batch)")


def offload_bitwise(name: str) -> str:
    """``offload.py``: the offloaded ``k`` whose gradients were bitwise equal to the baseline's
    (``1, 2``); an error when one was not."""
    rows = [r for r in load(name)["rows"] if r["k"]]
    bad = [r["k"] for r in rows if not r.get("grads_bitwise_equal")]
    if bad:
        raise KeyError(f"{name}: gradients not bitwise equal at k={bad}")
    return ", ".join(str(k) for k in sorted({r["k"] for r in rows}))


def _peer(name: str, variant: str, bs: str) -> dict:
    return next(r for r in load(name)["results"] if r["name"] == variant and r["bs"] == int(bs))


def peers(name: str, variant: str, bs: str, field: str) -> str:
    """A param_peers.py row at batch ``bs``: ``s`` (s/step), ``peak`` (GPU GiB), ``rss``
    (host high-water mark, GiB)."""
    r = _peer(name, variant, bs)
    if field == "s":
        return f"{r['s_per_step']:.3f}"
    if field == "peak":
        return f"{r['peak_gib']:.2f}"
    return f"{r['VmHWM'] / GiB:.1f}"


def peers_range(variant: str, bs: str) -> str:
    """s/step of ``variant`` over the three runs of 2026-11-25, lowest–highest."""
    vals = sorted(_peer(n, variant, bs)["s_per_step"] for n in PEER_RUNS)
    return f"{vals[0]:.3f}–{vals[-1]:.3f}"


def peers_speedup(bs: str) -> str:
    """memopt's tokens/s over FSDP2's at batch ``bs``, over the runs that have both."""
    ratios = []
    for n in PEER_RUNS:
        try:
            a, b = _peer(n, "memopt", bs), _peer(n, "fsdp2", bs)
        except StopIteration:
            continue
        ratios.append(b["s_per_step"] / a["s_per_step"])
    lo, hi = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
    return lo if lo == hi else f"{lo}–{hi}"


def peers_slower(name: str, variant: str, other: str, bs: str) -> str:
    """How much slower per step ``variant`` is than ``other``, whole %."""
    a, b = _peer(name, variant, bs), _peer(name, other, bs)
    return f"{100 * (a['s_per_step'] / b['s_per_step'] - 1):.0f}"


def host_floor(field: str) -> str:
    """param_cpu_adamw.py's host floor of 2026-11-25: ``h2d`` (GB/s), ``inplace`` (GB/s),
    ``adamw`` (s per fp32 AdamW step), ``params`` (billions)."""
    f = load("adamw25")["floor"]
    out = {
        "h2d": lambda: f"{f['h2d_GBps']:.1f}",
        "inplace": lambda: f"{f['inplace_GBps']:.0f}",
        "adamw": lambda: f"{f['adamw_fp32_floor_s']:.3f}",
        "params": lambda: f"{f['params'] / 1e9:.3f}",
    }
    return out[field]()


def host_adamw(field: str) -> str:
    """param_cpu_adamw.py's in-process AdamW timings of 2026-11-25: ``FIELD`` of its ``host``
    record, in s with 2 decimals (e.g. ``worker_team15_with_dma_s``)."""
    return f"{load('adamw25')['host'][field]:.2f}"


def host_adamw_ms(field: str, what: str = "s") -> str:
    """A ``host`` timing of 2026-11-25 in s with 3 decimals (``s``), or as a share of the fp32
    AdamW floor (``floor``, whole %)."""
    t = load("adamw25")["host"][field]
    if what == "floor":
        return f"{100 * load('adamw25')['floor']['adamw_fp32_floor_s'] / t:.0f}"
    return f"{t:.3f}"


def peers_first(variant: str, bs: str) -> str:
    """The first timed step after the compile step (``times[1]``) of ``variant`` over the
    three runs of 2026-11-25, lowest–highest (s, 3 decimals)."""
    vals = sorted(_peer(n, variant, bs)["times"][1] for n in PEER_RUNS)
    return f"{vals[0]:.3f}–{vals[-1]:.3f}"


def peers_field(name: str, variant: str, bs: str, key: str) -> str:
    """Any number of a param_peers.py row (2 decimals), e.g. ``host_wait_median_s``."""
    return f"{_peer(name, variant, bs)[key]:.2f}"


def _zoo_points() -> list[tuple[str, dict]]:
    out = []
    for m in ZOO:
        for p in compare(load(f"zoo_gpu_{m}.json"))["points"]:
            if p.get("peak_ok") is not None:
                out.append((m, p))
    return out


def zoo(what: str, model: str = "") -> str:
    """The GPU zoo's summary: ``met`` / ``points`` / ``cheaper`` (torch points where memopt
    met both targets / run / had the lower overhead), ``metwhere`` (which), ``prederr`` (range
    of the predicted peak's error of ``model``, whole %; ``prederr1``: 1 decimal),
    ``peaks`` / ``targets`` (range of memopt's budget peaks / of the budgets, GiB, of
    ``model``), ``below`` (range of torch's peak minus memopt's, GiB, 1 decimal, of the
    ``+``-joined models)."""
    ps = _zoo_points()
    if what == "met":
        return str(sum(bool(p["peak_ok"] and p["time_ok"]) for _, p in ps))
    if what == "points":
        return str(len(ps))
    if what == "cheaper":
        return str(sum(p["memopt_over"] < p["torch_over"] for _, p in ps))
    if what == "metwhere":
        met: dict[str, list[str]] = {}
        for m, p in ps:
            if p["peak_ok"] and p["time_ok"]:
                met.setdefault(m, []).append(str(p["budget"]))
        names = {"bert": "BERT", "vit": "ViT", "qwen2": "Qwen2", "resnet": "ResNet"}
        return ", ".join(f"{names.get(m, m)} {'/'.join(b)}" for m, b in met.items())
    if what == "below":  # how far memopt's budget peaks land under torch's, GiB
        models = model.split("+")
        gaps = sorted(p["torch"]["peak"] - p["memopt"]["peak"] for m, p in ps if m in models)
        return _range([f"{g / GiB:.1f}" for g in gaps], what, "-")
    mine = [p for m, p in ps if m == model]
    if what in ("prederr", "prederr1"):
        errs = sorted(100 * p["pred_err"] for p in mine if p.get("pred_err") is not None)
        nd = 1 if what == "prederr1" else 0
        return _range([f"{e:+.{nd}f}%" for e in errs], what, " to ")
    if what in ("peaks", "targets"):
        key = "peak" if what == "peaks" else "target"
        vals = sorted(p["memopt"][key] for p in mine)
        return _range([gib(v) for v in vals], what, "-")
    raise KeyError(f"no zoo value {what!r} (see docs_prose.zoo)")


def _range(texts: list[str], what: str, sep: str) -> str:
    """Lowest to highest, one value when they read alike."""
    if not texts:
        raise KeyError(f"zoo {what}: no data")
    return texts[0] if texts[0] == texts[-1] else f"{texts[0]}{sep}{texts[-1]}"


def zoo_row(model: str, variant: str, field: str) -> str:
    """A GPU zoo row: ``peak`` (GiB), ``over`` (step time against torch.compile, 1 decimal)
    or ``over0`` (whole %), ``ms`` (step time added, ms), ``pred`` (predicted peak, GiB),
    ``movedGB`` (offloaded GB each way), ``serial50`` (those copies both ways one after the other
    at 50 GB/s, ms), ``basems`` (the torch.compile step it is compared with, ms). ``variant``: ``level1``,
    ``offload``, ``t0.5`` (torch's budget), ``b0.5`` (memopt's budget at torch's peak)."""
    d = load(f"zoo_gpu_{model}.json")
    kinds = {"level1": "memopt level=1", "offload": "memopt offload half the layers"}
    if variant in kinds:
        want = kinds[variant]
    elif variant.startswith("t"):
        want = f"torch budget={variant[1:]}"
    else:
        want = f"memopt budget at torch {variant[1:]}"
    rows = {r["variant"]: r for r in d["rows"]}
    r = rows[want]
    again = rows.get("torch.compile again")
    base = again if again and r.get("resumed") else rows["torch.compile"]
    if field == "peak":
        return gib(r["peak"])
    if field == "pred":
        return gib(r["predicted_peak"])
    if field == "ms":  # step time added, ms
        return f"{r['ms'] - base['ms']:+.0f}"
    if field == "basems":
        return f"{base['ms']:.0f}"
    if field == "movedGB":  # bytes offloaded each way, GB
        return f"{r['offloaded_bytes'] / 1e9:.1f}"
    if field == "serial50":  # both ways serialized at 50 GB/s, ms
        return f"{2 * r['offloaded_bytes'] / 50e9 * 1e3:.0f}"
    nd = 0 if field == "over0" else 1
    return f"{100 * (r['ms'] / base['ms'] - 1):+.{nd}f}%"


def suite(field: str) -> str:
    """``docs_cpu.py ci``: ``full_min`` / ``quick_min`` (pytest minutes, 1 decimal),
    ``install_s`` (.ci/run's installs and lint, s), ``passed`` / ``skipped`` (the full suite),
    ``commit``."""
    d = load("ci")
    out = {
        "full_min": lambda: f"{d['full']['pytest_s'] / 60:.1f}",
        "quick_min": lambda: f"{d['quick']['pytest_s'] / 60:.1f}",
        "install_s": lambda: f"{d['install_s']:.0f}",
        "passed": lambda: str(d["full"]["passed"]),
        "skipped": lambda: str(d["full"]["skipped"]),
        "commit": lambda: d["commit"],
    }
    return out[field]()


def first_hour(field: str) -> str:
    """``docs_cpu.py first-hour``: ``train_s`` or ``plan_s`` (wall seconds, whole)."""
    return f"{load('first_hour')[field]:.0f}"


def mg(name: str, key: str, field: str, other: str = "") -> str:
    """A multi_gpu.py ``steps`` row by its key (``compile``, ``torch0.5``, ``memopt@0.1``,
    ``level1``, ``offload1`` ...): ``ms``, ``over`` (against torch.compile), ``peak`` (GiB),
    ``vs`` (step time against torch at the same point), ``peakover`` (peak over torch's at that
    point, %, 2 decimals), ``scale`` (tokens/s over file ``other``'s same row, 2 decimals),
    ``lossdiff`` (largest loss difference to file ``other``'s same row)."""
    rows = {r["key"]: r for r in load(name)["rows"] if "error" not in r}
    r = rows[key]
    point = rows.get({"memopt@0.5": "torch0.5", "memopt@0.1": "torch0.1"}.get(key, ""))
    out = {
        "ms": lambda: f"{r['ms']:.1f}",
        "over": lambda: pct(r["ms"], rows["compile"]["ms"]),
        "peak": lambda: gib(r["peak"]),
        "vs": lambda: pct(r["ms"], point["ms"]),
        "peakover": lambda: f"{100 * (r['peak'] / point['peak'] - 1):.2f}%",
        "scale": lambda: f"{r['tokens_per_s'] / _mg_row(other, key)['tokens_per_s']:.2f}",
        "lossdiff": lambda: (
            f"{max(abs(a - b) for a, b in zip(r['losses'], _mg_row(other, key)['losses'])):.1g}"
        ),
    }
    return out[field]()


def _mg_row(name: str, key: str) -> dict:
    return next(r for r in load(name)["rows"] if r["key"] == key)


def pcie(field: str) -> str:
    """diag_pcie.py at world 2: ``alone``/``both`` (GB/s GPU to host, lowest over the GPUs)."""
    ranks = load("pcie2")["ranks"]
    where = {"alone": "alone", "both": "together"}[field]
    return f"{min(r[where]['d2h'] for r in ranks):.0f}"


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


def peers_times(name: str, variant: str, sizes: str, start: str) -> str:
    """Lowest–highest single step of ``variant`` at the ``+``-joined batch ``sizes`` from step
    ``start`` on (``times``; the median is taken over the last 9 of 12; ``A-B``: steps A to B-1),
    s, 2 decimals."""
    lo, _, hi = start.partition("-")
    cut = slice(int(lo), int(hi) if hi else None)
    vals = sorted(t for bs in sizes.split("+") for t in _peer(name, variant, bs)["times"][cut])
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
    update, s)."""
    r = next(r for r in load(name)["results"] if "auto" in r)
    c = r["auto"]["choice"]
    out = {
        "share": lambda: f"{100 * c['host_share']:.0f}%",
        "step": lambda: f"{c['device_step_s']:.3f}",
        "adam": lambda: f"{c['adam_Bps'] / 1e9:.1f}",
        "update": lambda: f"{c['host_update_s']:.3f}",
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


VALUES: dict[str, Callable[..., str]] = {
    "mg": mg,
    "pcie": pcie,
    "suite": suite,
    "first_hour": first_hour,
    "fsdp": fsdp,
    "fsdp_vs": fsdp_vs,
    "losses": losses,
    "cli": cli,
    "cli_ratio": cli_ratio,
    "pareto": pareto,
    "copies": copies,
    "batch": batch,
    "offload_bitwise": offload_bitwise,
    "zoo": zoo,
    "zoo_row": zoo_row,
    "peers": peers,
    "peers_range": peers_range,
    "peers_speedup": peers_speedup,
    "peers_slower": peers_slower,
    "host_floor": host_floor,
    "host_adamw": host_adamw,
    "host_adamw_ms": host_adamw_ms,
    "peers_first": peers_first,
    "peers_field": peers_field,
    "lbatch": lbatch,
    "freeze": freeze,
    "freeze_ms": freeze_ms,
    "plantime": plantime,
    "offbase": offbase,
    "offrow": offrow,
    "copy_at": copy_at,
    "pareto_pt": pareto_pt,
    "pareto_all": pareto_all,
    "pareto_pred": pareto_pred,
    "pareto_moved": pareto_moved,
    "offload_slower": offload_slower,
    "peers_saves": peers_saves,
    "peers_times": peers_times,
    "adamw24": adamw24,
    "gaps_op": gaps_op,
    "pareto_span": pareto_span,
    "pareto_var": pareto_var,
    "offspan": offspan,
    "stability": stability,
    "peers_ratio": peers_ratio,
    "peers_auto": peers_auto,
    "floor_calc": floor_calc,
    "adamw_runs": adamw_runs,
    "peers_lossdiff": peers_lossdiff,
    "peers_busy": peers_busy,
    "peers_need": peers_need,
    "host_range": host_range,
    "floor_share": floor_share,
    "lbatch_meta": lbatch_meta,
}


def value(key: str) -> str:
    """The text of ``key`` (``NAME:ARG:...``)."""
    name, *args = key.split(":")
    if name not in VALUES:
        raise KeyError(f"prose number {key!r}: unknown name; add it to docs_prose.VALUES")
    try:
        return VALUES[name](*args)
    except (KeyError, StopIteration, TypeError, FileNotFoundError) as e:
        raise KeyError(f"prose number {key!r}: {e}") from None


def rewrite(text: str) -> tuple[str, list[str]]:
    """``text`` with every prose number rendered afresh, and the keys found."""
    keys: list[str] = []

    def sub(m: re.Match) -> str:
        keys.append(m["key"])
        return f"<!-- n:{m['key']} -->{value(m['key'])}<!-- /n -->"

    return MARKER.sub(sub, text), keys
