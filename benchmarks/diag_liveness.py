"""The budget planner's predicted peak against the measured one, term by term (issue 16).

Per zoo model (benchmarks/zoo_models.py), compiles in one process (``--variants``): memopt
with ``budget=1.0`` (``keep``: the plan that keeps every saved tensor, torch.compile's
partition), ``level=1`` with ``budget=1.0`` (``level1``: level 1's recomputes, the rest kept),
``budget=N`` (the planner at N bytes, measured after ``--warmup`` steps of probes and
re-plans), ``compile`` (plain torch.compile, measured only). For each: the region's prediction for the Plan it applied (the peak, the step's
phases, the static bytes, the non-candidate and candidate bytes at the peak, and the largest
values live there) and the same step measured (``torch.cuda.max_memory_allocated`` per phase;
on CPU only the saved bytes are measured). On CUDA one more step records the allocator's
history: the blocks live at its peak, by allocating line (``snapshot``). One JSON line per
model::

    python benchmarks/diag_liveness.py --model bert,vit,resnet,qwen2     # an H100, < 3 min
    python benchmarks/diag_liveness.py --model qwen2 --variants keep,budget=4869087232 --warmup 9
    python benchmarks/diag_liveness.py --model bert --size tiny --device cpu   # a check here

Models run in parallel processes (``--parallel``); each measures its own allocator.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODELS = ("bert", "vit", "resnet", "qwen2")
GiB = 2**30


def _capture(regions: list | None = None):
    """Record the planner's inputs as memopt.optimize builds them and the Plan decide applied
    (the last region's); with ``regions``, also one record per region planned, in order."""
    import memopt.passes.pipeline as pl
    import memopt.passes.plan_budget as pb

    seen: dict[str, Any] = {}
    build = pb.build_planning_problem

    def build_spy(joint, fw, bw, analysis, **kw):
        problem = build(joint, fw, bw, analysis, **kw)
        seen.clear()
        seen.update(fw=fw, bw=bw, analysis=analysis, kw=kw, problem=problem)
        if regions is not None:
            regions.append(seen.copy())
        return problem

    def decide_spy(r):
        r = pl.decide_pass(r)
        seen["plan"] = r.plan
        if regions:
            regions[-1]["plan"] = r.plan
        return r

    passes = tuple((n, decide_spy if n == "decide" else f) for n, f in pl.PASSES)
    run = pl.run_passes
    pb.build_planning_problem = build_spy
    pl.run_passes = lambda region, passes=passes: run(region, passes)
    return seen


def _prediction(seen: dict[str, Any], top: int, around_n: int = 0) -> dict[str, Any]:
    """The planner's curve for the decisions the region applied (its Plan), split at the
    peak."""
    from memopt.passes.build_planning_problem import Sizes, base_items
    from memopt.planner import memory_profile
    from memopt.planner.emit import sync_windows
    from memopt.planner.memory import intervals

    problem, plan = seen["problem"], seen["plan"]
    tl = problem.timeline
    decisions = {k: v for k, v in plan.per_root.items() if k in problem.by_name}
    windows = sync_windows(plan.sync, tl) if plan.sync else {}
    prof = memory_profile(problem, decisions, windows)
    curve, nf, t = prof.curve, tl.n_fwd, prof.peak_pos
    cand_at = []
    for c in problem.candidates:
        s = decisions.get(c.name, 0)
        w = windows.get(c.layer) if c.layer is not None else None
        b = sum(x for a, e, x in intervals(c, s, nf, w) if a <= t < e)
        if b:
            cand_at.append((c.name, b))
    kw = seen["kw"]
    sizes = Sizes(kw["value"])
    fw_ops, fw_items, bw_ops, bw_items = base_items(
        seen["fw"],
        seen["bw"],
        seen["analysis"],
        sizes,
        pad_matmuls=kw.get("pad_matmuls", False),
        layout_copies=kw.get("layout_copies", ()),
    )
    items, at = (fw_items, t) if t < nf else (bw_items, t - nf)
    live = [it for it in items if it.start <= at <= it.end]
    spans = {it.name: [it.start, it.end] for it in live}  # positions in the peak's graph
    largest = sorted(
        [(it.nbytes, it.kind, it.name) for it in live] + [(b, "candidate", n) for n, b in cand_at],
        reverse=True,
    )[:top]
    bw_nodes = bw_ops
    names = {it.name: it for it in bw_items}
    spans_c = []
    for c in problem.candidates:
        if any(c.name == n for n, _ in cand_at):
            q = lambda i: bw_nodes[i].name if 0 <= i < len(bw_nodes) else None  # noqa: E731
            spans_c.append(
                [
                    c.name,
                    c.nbytes,
                    c.first_bwd_use_pos,
                    q(c.first_bwd_use_pos),
                    c.bwd_last,
                    q(c.bwd_last),
                    bool(c.reused_when_kept),
                ]
            )
    around = []
    if t >= nf:
        for i in range(max(0, t - nf - around_n), min(len(bw_nodes), t - nf + around_n + 1)):
            n = bw_nodes[i]
            it = names.get(n.name)
            around.append(
                [
                    i,
                    n.name,
                    str(n.target),
                    [str(a) for a in n.all_input_nodes],
                    it.nbytes if it else None,
                    [it.start, it.end] if it else None,
                ]
            )
    return {
        "candidate_spans": spans_c,
        "around_peak": around,
        "peak": prof.peak,
        "peak_phase": prof.peak_phase,
        "peak_pos": t,
        "n_fwd": nf,
        "n_bwd": tl.n_positions - nf,
        "fwd_peak": max(curve[:nf]),
        "fwd_end": curve[nf - 1],
        "bwd_peak": max(curve[nf:]) if len(curve) > nf else None,
        "bwd_end": curve[-1] if len(curve) > nf else None,
        "static": tl.static_bytes,
        "base_at_peak": tl.base_bytes[t] - tl.static_bytes,
        "candidates_at_peak": sum(b for _, b in cand_at),
        "plans": list(plan.plan_strings()),
        "by_kind_at_peak": _by_kind(live),
        "largest_at_peak": [[n, k, b, *spans.get(n, [])] for b, k, n in largest],
        "attention_ops": sorted(
            {str(n.target) for n in fw_ops + bw_ops if "attention" in str(n.target)}
        ),
        "tangents": [[it.name, it.nbytes, it.end] for it in bw_items if it.kind == "tangent"],
    }


def _inductor(compiled) -> dict[str, Any] | None:
    """The region report's ``inductor`` section (Inductor's own buffer plan of the graphs,
    memopt.inductor_buffers) for the plan variant the last step ran."""
    import memopt

    rep = memopt.report(compiled)
    seq = rep.step.sequence if rep.step is not None else ()
    if len(seq) != 1:
        return None  # several regions: the step's peak is not one region's
    sec = dict(rep.regions[seq[0]].extra.get("inductor") or {})
    sec.pop("text", None)
    return sec or None


def _by_kind(live) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in live:
        out[it.kind] = out.get(it.kind, 0) + it.nbytes
    return out


def _frame(frames: list[dict]) -> str:
    """The innermost Python frame of an allocation in generated or model code, with its
    source line (Inductor's wrapper names the buffer there)."""
    import linecache

    for f in frames:
        name = f.get("filename", "")
        if name.endswith(".py") and ("torchinductor" in name or "transformers" in name):
            text = linecache.getline(name, f.get("line", 0)).strip()[:90]
            return f"{name.rsplit('/', 1)[-1]}:{f.get('line')}: {text}"
    py = [f for f in frames if f.get("filename", "").endswith(".py")]
    if py:
        return f"{py[0]['filename'].rsplit('/', 1)[-1]}:{py[0].get('line')}:{py[0].get('name')}"
    # no Python frame (autograd's device thread): the C++ callers that name the op
    skip = ("c10::", "torch::unwind", "??", "std::", "_start", "__libc", "at::native::empty")
    skip += ("torch::CapturedTraceback", "torch::cuda::", "at::detail::", "at::_ops::", "at::(")
    cpp = [f.get("name", "")[:60] for f in frames if not f.get("name", "??").startswith(skip)]
    return "C++: " + " <- ".join(cpp[:8])


def _replay(snapshot: dict, top: int) -> dict[str, Any]:
    """The recorded step's peak over its start and the blocks allocated during the step that
    are live at it, grouped by allocating line, largest first: bytes, blocks, and the event
    indices at which the group's first block was allocated and freed (free requested, free
    completed: a block another stream used is freed only when that stream's work is done)."""
    events = [e for dev in snapshot["device_traces"] for e in dev]
    live: dict[int, tuple[int, list, int]] = {}
    freed_at: dict[tuple[int, int], int] = {}  # (addr, alloc index) -> free index
    asked: dict[int, int] = {}  # addr -> index of its free_requested
    where: dict[int, str] = {}  # addr -> the line that freed it
    cur = best = best_at = 0
    best_live: dict[int, tuple[int, list, int]] = {}
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames", []), i)
            cur += e["size"]
            if cur > best:
                best, best_at, best_live = cur, i, dict(live)
        elif e["action"] == "free_requested" and e["addr"] in live:
            asked[e["addr"]] = i
            where[e["addr"]] = _frame(e.get("frames", []))
        elif e["action"] == "free_completed" and e["addr"] in live:
            size, _, born = live.pop(e["addr"])
            cur -= size
            freed_at[(e["addr"], born)] = (asked.pop(e["addr"], None), i, where.pop(e["addr"], ""))
    groups: dict[str, list] = {}
    for addr, (size, frames, born) in best_live.items():
        g = groups.setdefault(_frame(frames), [0, 0, born, freed_at.get((addr, born))])
        g[0], g[1] = g[0] + size, g[1] + 1
    rows = sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "peak_over_start": best,
        "peak_event": best_at,
        "events": len(events),
        "live": [[w, *g] for w, g in rows],
    }


def _measure(
    model, compiled, inputs, device: str, steps: int, warmup: int = 0, top: int = 8
) -> dict[str, Any]:
    """Per phase of the step: allocated bytes at its start and end and the peak inside it
    (the largest over ``steps`` steps after the first ``1 + warmup``); the saved bytes of
    the last. On CUDA one more step records the allocator's history: what is live at its
    peak (``snapshot``)."""
    import torch

    from benchmarks.zoo import _tensors
    from benchmarks.zoo_models import step_loss
    from memopt.measure import measure_saved

    cuda = device.startswith("cuda")
    exclude = [*model.parameters(), *model.buffers(), *_tensors(inputs)]

    def alloc() -> int:
        if not cuda:
            return 0
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    def peak_since(reset: bool = True) -> int:
        if not cuda:
            return 0
        torch.cuda.synchronize()
        p = torch.cuda.max_memory_allocated()
        if reset:
            torch.cuda.reset_peak_memory_stats()
        return p

    row: dict[str, Any] = {}
    for i in range(steps + 1 + warmup):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        start = alloc()
        peak_since()
        loss, saved = measure_saved(lambda: step_loss(compiled(**inputs)), exclude)
        fwd_peak, fwd_end = peak_since(), alloc()
        loss.backward()
        bwd_peak, bwd_end = peak_since(), alloc()
        if i <= warmup:
            continue  # the compile step, and the step plan's probes and re-plans
        now = dict(
            start=start,
            fwd_peak=fwd_peak,
            fwd_end=fwd_end,
            bwd_peak=bwd_peak,
            bwd_end=bwd_end,
            peak=max(fwd_peak, bwd_peak),
            saved=saved.compiled,
        )
        row = {k: max(v, row.get(k, v)) for k, v in now.items()}
    if cuda:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="all")
        step_loss(compiled(**inputs)).backward()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        row["snapshot"] = _replay(snap, top)
    return row


def _optimize(variant: str):
    """``keep`` (every saved tensor kept: torch.compile's partition), ``level1`` (level 1's
    recomputes, the rest kept) or ``budget=N`` (the planner at N bytes, as a user asks)."""
    import memopt

    if variant == "compile":
        return torch_compile
    if variant == "keep":
        return lambda m: memopt.optimize(m, level=0, budget=1.0)
    if variant == "level1":
        return lambda m: memopt.optimize(m, level=1, budget=1.0)
    if variant.startswith("budget="):
        b = float(variant.split("=", 1)[1])
        return lambda m: memopt.optimize(m, budget=int(b) if b > 1 else b)
    raise SystemExit(f"unknown variant {variant!r}: compile, keep, level1 or budget=N")


def torch_compile(model):
    import torch

    return torch.compile(model)


def worker(a: argparse.Namespace) -> None:
    import torch

    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME
    from memopt import _torch_compat as compat

    name, size, device, dtype, steps, top = a.worker, a.size, a.device, a.dtype, a.steps, a.top
    out: dict[str, Any] = {
        "model": name,
        "size": size,
        "device": device,
        "torch": torch.__version__,
    }
    if device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name()
    seen = _capture()
    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[name], size, device, getattr(torch, dtype))
        params = {p.untyped_storage().data_ptr(): p for p in model.parameters()}.values()
        out["params"] = sum(p.numel() * p.element_size() for p in params)
        out["inputs"] = sum(v.numel() * v.element_size() for v in inputs.values())
        for label in a.variants.split(","):
            compat.dynamo_reset()
            seen.clear()
            t0 = time.perf_counter()
            compiled = _optimize(label)(model)
            measured = _measure(model, compiled, inputs, device, steps, a.warmup, top)
            if label == "compile":  # plain torch.compile: measured only
                out[label] = {"measured": measured}
                continue
            pred = _prediction(seen, top, a.around)
            ind = _inductor(compiled)
            mpeak = measured.get("peak")
            out[label] = {
                "predicted": pred,
                "inductor": ind,
                "measured": measured,
                "error": (pred["peak"] / mpeak - 1) if mpeak else None,
                "inductor_error": (ind["peak"] / mpeak - 1) if mpeak and ind else None,
                # allocated before the step beyond the graphs' inputs (cuBLAS workspaces)
                "outside_graphs": measured["start"] - pred["static"] if measured["start"] else None,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            del compiled
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    print("@@diag " + json.dumps(out), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=",".join(MODELS), help="comma list of " + "|".join(MODELS))
    ap.add_argument("--size", default="gpu", choices=("tiny", "gpu"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=2, help="measured steps after the first")
    ap.add_argument("--top", type=int, default=8, help="largest values live at the peak")
    ap.add_argument("--variants", default="keep,level1", help="keep,level1,budget=N (bytes)")
    ap.add_argument("--warmup", type=int, default=0, help="steps before measuring (re-plans)")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--around", type=int, default=0, help="backward nodes each side of the peak")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    names = [m for m in a.model.split(",") if m]
    common = ["--size", a.size, "--device", a.device, "--dtype", a.dtype]
    common += ["--steps", str(a.steps), "--top", str(a.top), "--variants", a.variants]
    common += ["--around", str(a.around)]
    common += ["--warmup", str(a.warmup)]
    pending, running, rc = list(names), [], 0
    while pending or running:
        while pending and len(running) < a.parallel:
            m = pending.pop(0)
            cmd = [sys.executable, __file__, "--worker", m, *common]
            running.append((m, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)))
        m, proc = running.pop(0)
        stdout, _ = proc.communicate()
        lines = [x[len("@@diag ") :] for x in stdout.splitlines() if x.startswith("@@diag ")]
        if proc.returncode or not lines:
            print(json.dumps({"model": m, "error": f"exit {proc.returncode}"}), flush=True)
            rc = 1
        else:
            print(lines[-1], flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
