"""Prose numbers of the docs' newer sections (FSDP2 step plans, the CLI, the zoo, parameter
offload, the two-GPU run), registered in benchmarks/docs_prose.py's VALUES."""

from __future__ import annotations

import re
import statistics

from benchmarks.docs_fmt import GiB, gib, pct  # noqa: F401
from benchmarks.docs_prose_base import DATA, FILES, PEER_RUNS, ZOO, load, row  # noqa: F401
from benchmarks.zoo_gpu_report import compare  # noqa: F401


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
    out = "\n".join([*r["stdout_tail"], *r.get("planner_lines", ())])
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
    """Any number of a param_peers.py row (2 decimals), e.g. ``host_wait_median_s``; a dotted
    ``key`` reaches into a record (``nvme.read_GBps``)."""
    v = _peer(name, variant, bs)
    for k in key.split("."):
        v = v[k]
    return f"{v:.2f}"


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
    at 50 GB/s, ms), ``basems`` (the torch.compile step it is compared with, ms), ``kover``
    (GPU kernel time against torch.compile's, 1 decimal), ``kms`` (kernel ms added), ``gpums`` / ``hostms`` (kernel ms,
    host issue ms per step). ``variant``: ``compile``, ``level1``,
    ``offload``, ``native`` (torch's native offload), ``t0.5`` (torch's budget), ``b0.5``
    (memopt's budget at torch's peak), ``r0.5`` (the same on the roofline alone, ``[roof]``),
    ``g0.5`` and ``level1g`` (with the fusion guard, ``[guard]``).
    ``model`` may carry a run suffix (``vit_s11``)."""
    d = load(f"zoo_gpu_{model}.json")
    kinds = {
        "compile": "torch.compile",
        "level1": "memopt level=1",
        "offload": "memopt offload half the layers",
        "native": "native offload",
    }
    if variant in kinds:
        want = kinds[variant]
    elif variant.startswith("t"):
        want = f"torch budget={variant[1:]}"
    elif variant.startswith("r"):  # the budget plan priced on the roofline (``--ab roof:...``)
        want = f"memopt budget at torch {variant[1:]} [roof]"
    elif variant == "level1g":  # ``--ab guard:MEMOPT_FUSION_GUARD=1``
        want = "memopt level=1 [guard]"
    elif variant.startswith("g"):
        want = f"memopt budget at torch {variant[1:]} [guard]"
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
    if field == "kover":
        return f"{100 * (r['gpu_ms'] / base['gpu_ms'] - 1):+.1f}%"
    if field == "kms":  # GPU kernel time added, ms
        return f"{r['gpu_ms'] - base['gpu_ms']:+.2f}"
    if field in ("gpums", "hostms"):
        return f"{r[field[:-2] + '_ms']:.1f}"
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
    ``level1``, ``offload1`` ...): ``ms``, ``over`` (against torch.compile: the mean of its
    first row and, where the run has it, ``compile_end``, its second), ``peak`` (GiB),
    ``vs`` (step time against torch at the same point), ``ratio`` (the time it adds to
    torch.compile's over what torch's plan at that point adds, 2 decimals), ``peakover`` (peak over torch's at that
    point, %, 2 decimals), ``scale`` (tokens/s over file ``other``'s same row, 2 decimals),
    ``lossdiff`` (largest loss difference to file ``other``'s same row)."""
    rows = {r["key"]: r for r in load(name)["rows"] if "error" not in r}
    r = rows[key]
    base = statistics.fmean(rows[k]["ms"] for k in ("compile", "compile_end") if k in rows)
    point = rows.get(f"torch{key[-3:]}" if key.startswith(("memopt@", "auto@")) else "")
    out = {
        "ms": lambda: f"{r['ms']:.1f}",
        "over": lambda: pct(r["ms"], base),
        "peak": lambda: gib(r["peak"]),
        "vs": lambda: pct(r["ms"], point["ms"]),
        "ratio": lambda: f"{(r['ms'] - base) / (point['ms'] - base):.2f}",
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


def zoo_pts(model: str, what: str) -> str:
    """Range over the budget points of ``zoo_gpu_{model}.json`` (``compare``): ``faster`` (how
    much faster than torch.compile memopt's budget steps ran, %, 1 decimal), ``overrun``
    (memopt's measured peak over its budget, %, 1 decimal), ``under`` (how far the predicted
    peak fell under the measured one, whole %), ``kratio`` (memopt's over torch's overhead in
    kernel time per point, 2 decimals, `` / ``-joined as in the tables), ``wmet`` / ``kmet``
    (points where memopt's peak is at most torch's and its overhead at most half of torch's, in
    step time / in kernel time). ``what@tag``: memopt's points are the run's ``--ab`` rows of
    that tag (``kratio@fused``)."""
    what, _, ab = what.partition("@")
    ps = compare(load(f"zoo_gpu_{model}.json"), ab=ab)["points"]
    if what == "kratio":
        return " / ".join("-" if p["kratio"] is None else f"{p['kratio']:.2f}" for p in ps)
    if what == "wmet":
        return str(sum(bool(p.get("peak_ok") and p.get("time_ok")) for p in ps))
    if what == "kmet":
        k = [p for p in ps if p.get("peak_ok") and p["memopt_kover"] is not None]
        return str(sum(p["memopt_kover"] <= 0.5 * p["torch_kover"] for p in k))
    if what == "faster":
        vals = sorted(-100 * p["memopt_over"] for p in ps)
        return _range([f"{v:.1f}" for v in vals], what, "-")
    if what == "overrun":
        vals = sorted(100 * (p["memopt"]["peak"] / p["memopt"]["target"] - 1) for p in ps)
        return _range([f"{v:.1f}" for v in vals], what, "-")
    if what == "under":
        vals = sorted(-100 * p["pred_err"] for p in ps if p.get("pred_err") is not None)
        return _range([f"{v:.0f}" for v in vals], what, "-")
    raise KeyError(f"no zoo_pts value {what!r} (see docs_prose.zoo_pts)")


def zoo_cpu(model: str, field: str) -> str:
    """``zoo_cpu.json``: ``l1share`` (bytes measured at level 1 as a share of the unoptimized
    bytes of ``model``, whole %); model ``all``, field ``minutes``: the rows' ``seconds``
    summed, whole minutes."""
    rows = [r for r in load("zoo_cpu.json")["rows"] if "measured" in r]
    if model == "all" and field == "minutes":
        return f"{sum(r['seconds'] for r in rows) / 60:.0f}"
    r = next(r for r in rows if r["model"] == model)
    if field == "l1share":
        return f"{100 * r['level1_measured'] / r['measured']:.0f}%"
    raise KeyError(f"no zoo_cpu field {field!r} (see docs_prose.zoo_cpu)")


def dpk(name: str, variant: str, field: str, base: str = "") -> str:
    """A ``diag_plan_kernels_<name>.json`` row by its variant (``compile``, ``torch=0.5``,
    ``budget=<bytes>``): ``gpums`` (GPU kernel ms per step, 2 decimals), ``extra`` (kernel ms
    over the compile row, 2 decimals), ``over`` (that as %, 1 decimal), ``pred`` (memopt's
    predicted overhead, ms, 2 decimals), ``peak`` (GiB, 2 decimals). The compile row is taken
    from file ``base`` where given (the row's own file has none)."""
    rows = {r["variant"]: r for r in load(f"diag_plan_kernels_{name}.json")}
    r = rows[variant]

    def ref() -> float:
        ref_rows = {x["variant"]: x for x in load(f"diag_plan_kernels_{base or name}.json")}
        return ref_rows["compile"]["gpu_ms"]

    out = {
        "gpums": lambda: f"{r['gpu_ms']:.2f}",
        "extra": lambda: f"{r['gpu_ms'] - ref():.2f}",
        "over": lambda: pct(r["gpu_ms"], ref()),
        "pred": lambda: f"{r['predicted']['overhead_ms']:.2f}",
        "peak": lambda: gib(r["peak"]),
    }
    return out[field]()
