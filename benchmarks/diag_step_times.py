"""Step by step: why a variant's median step is slower than its kernels (a host-bound step).

For each variant of one zoo model (one per process, as benchmarks/zoo_gpu.py runs them): the
wall time of every step after the compile step (each step synchronized, as ``step_stats``
times them), the host's issue time of each (until ``step()`` returns), and, over a few steady
steps under the profiler, the host calls that wait for the GPU (``cudaDeviceSynchronize``,
``cudaStreamSynchronize``, ``cudaEventSynchronize``, blocking copies) with their counts, and,
under cProfile over ``--pysteps`` more steps (issue only, not synchronized), the host's Python
time by where its code lives (memopt, dynamo, autograd, Inductor's compiled code, ...) and the
memopt functions that take it (``py_host``; cProfile slows every call, so its milliseconds are
for comparing shares, not absolute). Without a GPU it runs on the CPU (``--size tiny``). ::

    python benchmarks/diag_step_times.py --model convnext --variants compile,budget:2084477440 \
        --steps 40 --json $OUT/convnext_steps.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WAITS = ("Synchronize", "cudaMemcpy", "cudaStreamWaitEvent", "cudaHostAlloc", "cudaFree")


def _variant(text: str) -> dict:
    kind, _, arg = text.partition(":")
    if kind == "budget":
        t = float(arg)  # bytes, or a fraction (on the CPU, where no peak is measured)
        return {"kind": "budget", "target": t if t < 1 else int(t)}
    if kind == "torch":
        return {"kind": "torch", "budget": float(arg)}
    return {"kind": kind}


#: where a function's code lives -> the share it is reported under (first match wins)
AREAS = (
    ("/memopt/", "memopt"),
    ("/passes/", "memopt"),
    ("torchinductor", "inductor compiled code"),
    ("/torch/_inductor/", "inductor runtime"),
    ("/torch/_dynamo/", "dynamo"),
    ("/torch/_functorch/", "functorch (aot runtime)"),
    ("/torch/autograd/", "autograd"),
    ("/torch/", "torch other"),
    ("/transformers/", "model (transformers)"),
    ("/timm/", "model (timm)"),
    ("/diffusers/", "model (diffusers)"),
    ("/benchmarks/", "benchmark"),
)


def _area(filename: str) -> str:
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins (C calls)"
    return next((name for key, name in AREAS if key in filename), "other python")


def py_host(step, steps: int, sync) -> dict:
    """cProfile over ``steps`` issued steps: ms per step by area, and memopt's top functions
    by their own time and by cumulative time."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    sync()
    for _ in range(steps):
        prof.enable()
        step()
        prof.disable()
        sync()
    st = pstats.Stats(prof)
    areas: dict[str, float] = {}
    mine = []
    for (fn, line, name), (_cc, _nc, tt, ct, _callers) in st.stats.items():
        area = _area(fn)
        areas[area] = areas.get(area, 0.0) + tt
        if area == "memopt":
            mine.append((f"{Path(fn).name}:{line} {name}", tt, ct))
    per = 1e3 / steps
    return {
        "steps": steps,
        "self_ms_per_step_by_area": {k: round(v * per, 3) for k, v in sorted(areas.items())},
        "memopt_top_self_ms": {
            k: round(t * per, 3) for k, t, _ in sorted(mine, key=lambda x: -x[1])[:15]
        },
        "memopt_top_cum_ms": {
            k: round(c * per, 3) for k, _, c in sorted(mine, key=lambda x: -x[2])[:15]
        },
    }


def run_one(model_name: str, variant: dict, steps: int, size: str, pysteps: int = 10) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.zoo import build
    from benchmarks.zoo_gpu import _compile
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with compat.no_compile_caches():
        dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
        model, inputs = build(BY_NAME[model_name], size, dev, dtype)
        compiled = _compile(model, variant)

        def step():
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            loss = step_loss(compiled(**inputs))
            loss.backward()
            return loss

        walls, hosts = [], []
        for _ in range(steps):
            sync()
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            walls.append(round(1e3 * (t2 - t0), 2))
            hosts.append(round(1e3 * (t1 - t0), 2))
        python = py_host(step, pysteps, sync) if pysteps else {}
        sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            for _ in range(3):
                step()
            sync()
    waits = {}
    for e in prof.key_averages():
        if any(w in e.key for w in WAITS):
            waits[e.key] = {"count": e.count // 3, "host_ms": e.cpu_time_total / 3e3}
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    return {
        "variant": variant,
        "wall_ms": walls,
        "host_ms": hosts,
        "waits_per_step": waits,
        "top_host_self_ms_per_step": {e.key[:80]: e.self_cpu_time_total / 3e3 for e in top},
        "py_host": python,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--variants", default="compile")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--size", default="gpu")
    p.add_argument("--pysteps", type=int, default=10, help="steps under cProfile (0: none)")
    p.add_argument("--json")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        import logging

        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("memopt").setLevel(logging.INFO)
        row = run_one(a.model, _variant(a.worker), a.steps, a.size, a.pysteps)
        print("@@" + json.dumps(row))
        return
    rows = []
    for v in a.variants.split(","):
        cmd = [sys.executable, __file__, "--model", a.model, "--steps", str(a.steps)]
        cmd += ["--pysteps", str(a.pysteps)]
        out = subprocess.run(
            cmd + ["--size", a.size, "--worker", v], capture_output=True, text=True
        )
        lines = [ln[2:] for ln in out.stdout.splitlines() if ln.startswith("@@")]
        row = json.loads(lines[-1]) if lines else {"variant": v, "error": out.stderr[-3000:]}
        row["memopt_log"] = [ln for ln in out.stderr.splitlines() if "memopt" in ln][-60:]
        rows.append(row)
        print(json.dumps(row, indent=1)[:4000], flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
