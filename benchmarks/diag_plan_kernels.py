"""Where does a plan's extra step time go? Per variant of a GPU zoo model: the median step
after the plan settled, GPU kernel time and kernel launches per step, the top kernels, and
memopt's compiles and step plans. Compares a plan's measured cost with its prediction when
recompute is many small kernels (Whisper's budget plans: +21% measured, ~4% predicted).

    python benchmarks/diag_plan_kernels.py --model whisper --variants compile,level1,budget=1950156800 --out $OUT/diag_whisper.json
    python benchmarks/diag_plan_kernels.py --model whisper --batch 32 \
        --variants compile,torch=0.5,budget=@torch=0.5 --out $OUT/diag_whisper_b32.json
        # ``budget=@V``: memopt at the peak variant V measured

Each variant runs in its own process (fresh dynamo state and caching allocator).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one(model: str, variant: str, warmup: int, iters: int, batch: int | None = None) -> dict:

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    import memopt
    from benchmarks.common import memopt_log
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat
    from memopt import api

    fwd_all: list[float] = []  # every step's forward (the log lines' step numbers)
    # memopt's INFO log: its step plans, probes and corrections
    lines = memopt_log(lambda: f"{len(fwd_all)} ", width=400)
    with compat.no_compile_caches():
        m, x = build(BY_NAME[model], "gpu", "cuda", torch.bfloat16, batch or None)
        if variant == "compile":
            c = torch.compile(m)
        elif variant.startswith("torch="):  # torch.compile's activation_memory_budget
            torch._functorch.config.activation_memory_budget = float(variant.split("=", 1)[1])
            c = torch.compile(m)
        elif variant == "level1":
            c = memopt.optimize(m, level=1)
        else:
            c = memopt.optimize(m, budget=int(variant.split("=", 1)[1]))
        state = api._STATES.get(c)

        fwd: list[float] = []

        def step():
            m.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            t0 = time.perf_counter()
            loss = step_loss(c(**x))
            fwd.append(1e3 * (time.perf_counter() - t0))
            fwd_all.append(fwd[-1])
            loss.backward()

        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times, cpu = [], []
        fwd.clear()
        for _ in range(iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            cpu.append(1e3 * (time.perf_counter() - t0))  # the host's time to issue the step
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t0))
        fwd_ms = statistics.median(fwd)
        peak = torch.cuda.max_memory_allocated()
        prof_py = cProfile.Profile()  # the forward's Python (backward runs in autograd's thread)
        torch.cuda.synchronize()
        prof_py.enable()
        for _ in range(3):
            step()
        prof_py.disable()
        torch.cuda.synchronize()
        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=acts) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
    avg = prof.key_averages()
    ks = [  # compute kernels, as common.kernel_ms counts them (side-stream copies left out)
        e
        for e in avg
        if e.self_device_time_total > 0
        and e.device_type == DeviceType.CUDA
        and not e.key.startswith(("Memcpy", "Memset"))
    ]
    waits = ("Synchronize", "cudaMemcpy", "_local_scalar_dense", "cudaStreamWaitEvent")
    host = {e.key: e.count // 3 for e in avg if any(w in e.key for w in waits)}
    text = io.StringIO()
    pstats.Stats(prof_py, stream=text).sort_stats("tottime").print_stats(30)
    top = sorted(ks, key=lambda e: -e.self_device_time_total)[:12]
    return {
        "model": model,
        "variant": variant,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "ms": statistics.median(times),
        "times": [round(t, 2) for t in times],
        "peak": peak,
        "batch": batch,
        "cpu_ms": statistics.median(cpu),
        "fwd_cpu_ms": fwd_ms,
        "host_waits": host,
        "python_top": text.getvalue()[-6000:],
        "gpu_ms": sum(e.self_device_time_total for e in ks) / 3e3,
        "launches": sum(e.count for e in ks) // 3,
        "top": [(e.key[:90], e.self_device_time_total / 3e3, e.count // 3) for e in top],
        "step_plans": getattr(state, "_step_plans", None),
        "runs": list(getattr(state, "last_report_step", ()) or ()),
        "predicted": _predicted(state),
        "sections": _sections(state),
        "memopt_log": lines[-60:],
    }


def _sections(state) -> dict:
    """Per region of the step, Inductor's buffer plan of its compiled plan against the
    planner's model of that plan (the report's ``inductor`` section, docs/zoo.md)."""
    regions = getattr(state, "regions", None) or []
    keys = ("peak", "model_peak", "fwd_peak", "bwd_peak", "static", "workspaces")
    return {
        str(i): {k: v for k, v in (r.extra.get("inductor") or {}).items() if k in keys}
        for i, r in enumerate(regions)
    }


def _predicted(state) -> dict | None:
    """The step plan's predicted overhead and peak, and each region's chosen plans."""
    c = getattr(state, "step_choice", None)
    if c is None:
        return None
    return {
        "overhead_ms": c.overhead_s * 1e3,
        "peak": c.peak,
        "target": c.target,
        "regions": {
            str(r): {"plans": list(o.plans), "overhead_ms": o.overhead_s * 1e3}
            for r, o in c.chosen.items()
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="whisper")
    p.add_argument("--variants", default="compile,level1")
    p.add_argument("--warmup", type=int, default=9)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--batch", type=int, default=0, help="the model's GPU size at this batch")
    p.add_argument("--out", default="diag_plan_kernels.json")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print("@@" + json.dumps(one(a.model, a.one, a.warmup, a.iters, a.batch)), flush=True)
        return
    rows = []
    for v in [v for v in a.variants.split(",") if v]:
        if v.startswith("budget=@"):  # at the peak an earlier variant measured
            peaks = {r["variant"]: r.get("peak") for r in rows}
            v = f"budget={peaks[v.split('@', 1)[1]]}"
        cmd = [sys.executable, __file__, "--model", a.model, "--one", v]
        cmd += ["--warmup", str(a.warmup), "--iters", str(a.iters), "--batch", str(a.batch)]
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        got = [ln[2:] for ln in out.stdout.splitlines() if ln.startswith("@@")]
        row = json.loads(got[0]) if got else {"variant": v, "error": out.stderr[-2000:]}
        rows.append(row)
        print(
            json.dumps(
                {k: row.get(k) for k in ("variant", "ms", "cpu_ms", "gpu_ms", "launches", "peak")}
            )
        )
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
