"""The budget planner's predicted peak against the measured one, term by term (issue 16).

Per zoo model (benchmarks/zoo_models.py), two compiles in one process: memopt with
``budget=1.0`` (the plan that keeps every saved tensor: torch.compile's partition) and
``level=1`` with ``budget=1.0`` (level 1's recomputes, the rest kept). For each: the
planner's prediction (the peak, the step's phases, the static bytes, the non-candidate and
candidate bytes at the peak, and the largest values live there) and the same step measured
(``torch.cuda.max_memory_allocated`` per phase; on CPU only the saved bytes are measured).
One JSON line per model::

    python benchmarks/diag_liveness.py --model bert,vit,resnet,qwen2     # an H100, < 3 min
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


def _capture():
    """Record the planner's inputs and its solution as memopt.optimize plans (the last
    region's)."""
    import memopt.passes.plan_budget as pb

    seen: dict[str, Any] = {}
    build, solve = pb.build_planning_problem, pb.solve

    def build_spy(joint, fw, bw, analysis, **kw):
        problem = build(joint, fw, bw, analysis, **kw)
        seen.update(fw=fw, bw=bw, analysis=analysis, kw=kw, problem=problem)
        return problem

    def solve_spy(*a, **kw):
        seen["solution"] = solve(*a, **kw)
        return seen["solution"]

    pb.build_planning_problem, pb.solve = build_spy, solve_spy
    return seen


def _prediction(seen: dict[str, Any], top: int) -> dict[str, Any]:
    """The planner's curve for its own decisions, split at the peak."""
    from memopt.passes.build_planning_problem import Sizes, base_items
    from memopt.planner import memory_profile
    from memopt.planner.emit import sync_windows
    from memopt.planner.memory import intervals

    problem, sol = seen["problem"], seen["solution"]
    tl = problem.timeline
    windows = sync_windows(sol.sync, tl) if sol.sync else {}
    prof = memory_profile(problem, sol.decisions, windows)
    curve, nf, t = prof.curve, tl.n_fwd, prof.peak_pos
    cand_at = []
    for c in problem.candidates:
        s = sol.decisions.get(c.name, 0)
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
    largest = sorted(
        [(it.nbytes, it.kind, it.name) for it in live] + [(b, "candidate", n) for n, b in cand_at],
        reverse=True,
    )[:top]
    return {
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
        "saved_kept": sol.saved.on_device,
        "by_kind_at_peak": _by_kind(live),
        "largest_at_peak": [[n, k, b] for b, k, n in largest],
        "attention_ops": sorted(
            {str(n.target) for n in fw_ops + bw_ops if "attention" in str(n.target)}
        ),
        "tangents": [[it.name, it.nbytes, it.end] for it in bw_items if it.kind == "tangent"],
    }


def _by_kind(live) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in live:
        out[it.kind] = out.get(it.kind, 0) + it.nbytes
    return out


def _measure(model, compiled, inputs, device: str, steps: int) -> dict[str, Any]:
    """Per phase of the step: allocated bytes at its start and end and the peak inside it
    (the largest over ``steps`` steps after the first); the saved bytes of the last."""
    import torch

    from benchmarks.zoo_models import step_loss
    from memopt.measure import measure_saved

    cuda = device.startswith("cuda")
    exclude = [*model.parameters(), *model.buffers(), *inputs.values()]

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

    row: dict[str, int] = {}
    for i in range(steps + 1):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        start = alloc()
        peak_since()
        loss, saved = measure_saved(lambda: step_loss(compiled(**inputs)), exclude)
        fwd_peak, fwd_end = peak_since(), alloc()
        loss.backward()
        bwd_peak, bwd_end = peak_since(), alloc()
        if i == 0:
            continue  # the compile step
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
    return row


def worker(name: str, size: str, device: str, dtype: str, steps: int, top: int) -> None:
    import torch

    import memopt
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME
    from memopt import _torch_compat as compat

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
        for label, level in (("keep", 0), ("level1", 1)):
            compat.dynamo_reset()
            seen.clear()
            t0 = time.perf_counter()
            compiled = memopt.optimize(model, level=level, budget=1.0)
            measured = _measure(model, compiled, inputs, device, steps)
            pred = _prediction(seen, top)
            out[label] = {
                "predicted": pred,
                "measured": measured,
                "error": (pred["peak"] / measured["peak"] - 1) if measured.get("peak") else None,
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
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.size, a.device, a.dtype, a.steps, a.top)
        return 0
    names = [m for m in a.model.split(",") if m]
    common = ["--size", a.size, "--device", a.device, "--dtype", a.dtype]
    common += ["--steps", str(a.steps), "--top", str(a.top)]
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
