"""Why is in-graph offload slow on a zoo model (ViT: +416% with half the layers offloaded,
+52% for a budget plan that offloads 258 MB)? Plain torch.compile against memopt variants of
one zoo model, each profiled over a few steps: step time, compute-stream busy and idle time,
every host copy (kind, bytes, duration, stream), the CUDA runtime calls that take the CPU's
time (pinned allocations, synchronizations) and the compute stream's 40 costliest kernels.

    python benchmarks/diag_zoo_offload.py --model vit --variants compile,offload=1,budget=4221245030 \
        --out diag_vit.json        # on the GPU
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _trace(step, steps: int) -> list[dict]:
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    return json.load(open(path)).get("traceEvents", [])


def summarize(events: list[dict], steps: int) -> dict:
    """Per step: compute-stream busy/idle, copies by kind, runtime calls by total time."""
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy" and "dur" in e]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime" and "dur" in e]
    streams = collections.Counter(int((e.get("args") or {}).get("stream", -1)) for e in kernels)
    main = streams.most_common(1)[0][0] if streams else -1
    mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels if e["args"]["stream"] == main)
    busy = sum(b - a for a, b in mine)
    span = (mine[-1][1] - mine[0][0]) if mine else 0.0
    kinds: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, 0])
    for c in copies:
        k = f"{c.get('name', '?')} stream {c['args'].get('stream')}"
        kinds[k][0] += 1
        kinds[k][1] += c["dur"]
        kinds[k][2] += int(c["args"].get("bytes", 0))
    calls: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for r in runtime:
        calls[r["name"]][0] += 1
        calls[r["name"]][1] += r["dur"]
    top = sorted(calls.items(), key=lambda kv: -kv[1][1])[:12]
    names: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])  # compute-stream kernels
    for e in kernels:
        if e["args"]["stream"] == main:
            names[e["name"][:120]][0] += 1
            names[e["name"][:120]][1] += e["dur"]
    heavy = sorted(names.items(), key=lambda kv: -kv[1][1])[:40]
    gaps = sorted((b[0] - a[1] for a, b in zip(mine, mine[1:]) if b[0] > a[1]), reverse=True)
    return {
        "kernels_per_step": len(kernels) / steps,
        "compute_busy_ms": busy / 1e3 / steps,
        "compute_span_ms": span / 1e3 / steps,
        "compute_idle_ms": (span - busy) / 1e3 / steps,
        "largest_gaps_ms": [round(g / 1e3, 3) for g in gaps[:8]],
        "copies": {
            k: {"count": v[0] / steps, "ms": v[1] / 1e3 / steps, "MB": v[2] / 1e6 / steps}
            for k, v in kinds.items()
        },
        "runtime_calls": {k: {"count": v[0] / steps, "ms": v[1] / 1e3 / steps} for k, v in top},
        "kernels": {k: {"count": v[0] / steps, "ms": v[1] / 1e3 / steps} for k, v in heavy},
    }


def compile_variant(model, spec: str):
    import memopt

    if spec == "compile":
        return torch.compile(model)
    key, _, val = spec.partition("=")
    if key == "offload":
        return memopt.optimize(model, offload_layers=int(val))
    if key == "budget":
        return memopt.optimize(model, budget=int(val))
    if key == "budget_noffload":
        return memopt.optimize(model, budget=int(val), disable_passes=("offload",))
    raise SystemExit(f"unknown variant {spec}")


def one(args, spec: str) -> dict:
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat

    torch._dynamo.reset()
    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[args.model], "gpu", "cuda", torch.bfloat16)
        compiled = compile_variant(model, spec)

        def step():
            model.zero_grad(set_to_none=True)
            step_loss(compiled(**inputs)).backward()

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(1e3 * (time.perf_counter() - t))
        row = {"variant": spec, "ms": statistics.median(times)}
        row.update(summarize(_trace(step, args.steps), args.steps))
        if spec != "compile":
            import memopt

            rep = memopt.report(compiled)
            row["offloaded_bytes"] = rep.offloaded_bytes()
            row["offload"] = [r.extra.get("offload", {}).get("text") for r in rep.regions]
    return row


def run(args) -> dict:
    out = {"model": args.model, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    out["rows"] = []
    for spec in args.variants.split(","):
        out["rows"].append(one(args, spec))
        print(json.dumps(out["rows"][-1])[:2000], flush=True)
        torch.cuda.empty_cache()
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit")
    p.add_argument("--variants", default="compile,offload=1")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    run(a)


if __name__ == "__main__":
    main()
