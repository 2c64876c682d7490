"""Where a step's host time goes (issue 16): one zoo model at GPU size, torch.compile against
memopt settings, each timed (wall, the host's issue time, kernel time) and profiled: the ops and
CUDA runtime calls by the host's own time, and memopt's host-buffer pool counts::

    python benchmarks/diag_host_time.py --model convnext --budget 2083920384 --out $OUT/h.json

A variant is ``name=json settings`` for ``memopt.optimize`` (``compile``: plain torch.compile);
the defaults compare a byte budget with the loss fused (the budget's default), unfused, and
without offload. Each variant runs in this process after ``torch._dynamo.reset()``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def variants(budget: int) -> dict[str, dict | None]:
    return {
        "compile": None,
        "budget": {"budget": budget},
        "budget_unfused": {"budget": budget, "fuse_loss": False},
        "budget_no_offload": {"budget": budget, "disable_passes": ["offload"]},
    }


def profile_step(step, n: int = 3, top: int = 25) -> dict:
    """The host's own time per op and CUDA runtime call over ``n`` profiled steps (µs per
    step), the largest ``top``, and the counts of the runtime calls that wait or pin."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    out = [
        {"op": e.key[:90], "self_us": round(e.self_cpu_time_total / n, 1), "calls": e.count / n}
        for e in rows[:top]
    ]
    waits = ("Synchronize", "HostAlloc", "HostRegister", "MallocHost", "cudaMalloc", "cudaFree")
    calls = {e.key: e.count / n for e in rows if any(w in e.key for w in waits)}
    return {"top": out, "runtime_calls": calls}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--budget", type=int, required=True, help="bytes (torch's peak at a point)")
    p.add_argument("--variants", help="comma list of default variant names to run")
    p.add_argument("--warmup", type=int, default=9)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    import torch

    chosen = variants(a.budget)
    if a.variants:
        chosen = {k: chosen[k] for k in a.variants.split(",")}
    rows = []
    for name, settings in chosen.items():
        row = measure(a, name, settings)
        rows.append(row)
        brief = {k: row.get(k) for k in ("variant", "ms", "gpu_ms", "host_ms", "peak", "error")}
        print(json.dumps(brief), flush=True)
        for r in row.get("profile", {}).get("top", [])[:12]:
            print("   ", r, flush=True)
        print("    runtime:", row.get("profile", {}).get("runtime_calls"), flush=True)
        with open(a.out, "w") as f:
            json.dump({"model": a.model, "budget": a.budget, "torch": torch.__version__,
                       "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)  # fmt: skip
        torch.cuda.empty_cache()


def measure(a, name: str, settings: dict | None) -> dict:
    """One variant built, compiled, timed and profiled; an error is recorded in the row."""
    import torch

    import memopt
    from benchmarks.common import kernel_ms, step_stats
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat
    from memopt.offload import ops

    torch._dynamo.reset()
    t0 = time.time()
    row: dict = {"variant": name, "settings": settings}
    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[a.model], "gpu", "cuda", torch.bfloat16)
        compiled = torch.compile(model) if settings is None else memopt.optimize(model, **settings)

        def step():
            model.zero_grad(set_to_none=True)
            loss = step_loss(compiled(**inputs))
            loss.backward()
            return loss

        try:
            ms, peak = step_stats(step, warmup=a.warmup, iters=a.iters)
            gpu, host = kernel_ms(step)
            pool0 = ops.POOL.stats()
            row.update(ms=ms, peak=peak, gpu_ms=gpu, host_ms=host)
            row["profile"] = profile_step(step)
            pool1 = ops.POOL.stats()
            row["pool_allocations_in_profiled_steps"] = pool1.allocations - pool0.allocations
            row["pool"] = dataclasses.asdict(pool1)
        except Exception as e:  # recorded; the next variant runs
            row["error"] = f"{type(e).__name__}: {e}"[:1000]
    row["wall_s"] = round(time.time() - t0, 1)
    return row


if __name__ == "__main__":
    main()
