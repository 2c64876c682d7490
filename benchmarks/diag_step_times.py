"""Step by step: why a variant's median step is slower than its kernels (a host-bound step).

For each variant of one zoo model (one per process, as benchmarks/zoo_gpu.py runs them): the
wall time of every step after the compile step (each step synchronized, as ``step_stats``
times them), the host's issue time of each (until ``step()`` returns), and, over a few steady
steps under the profiler, the host calls that wait for the GPU (``cudaDeviceSynchronize``,
``cudaStreamSynchronize``, ``cudaEventSynchronize``, blocking copies) with their counts. ::

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
        return {"kind": "budget", "target": int(float(arg))}
    if kind == "torch":
        return {"kind": "torch", "budget": float(arg)}
    return {"kind": kind}


def run_one(model_name: str, variant: dict, steps: int, size: str) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.zoo import build
    from benchmarks.zoo_gpu import _compile
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat

    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[model_name], size, "cuda", torch.bfloat16)
        compiled = _compile(model, variant)

        def step():
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            loss = step_loss(compiled(**inputs))
            loss.backward()
            return loss

        walls, hosts = [], []
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            walls.append(round(1e3 * (t2 - t0), 2))
            hosts.append(round(1e3 * (t1 - t0), 2))
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
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
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--variants", default="compile")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--size", default="gpu")
    p.add_argument("--json")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        import logging

        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("memopt").setLevel(logging.INFO)
        print("@@" + json.dumps(run_one(a.model, _variant(a.worker), a.steps, a.size)))
        return
    rows = []
    for v in a.variants.split(","):
        cmd = [sys.executable, __file__, "--model", a.model, "--steps", str(a.steps)]
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
