"""Where does a budget plan's step time go? The plan, its recompute part alone, its offload part
alone, and plain torch.compile, each timed and profiled (kernel time on the compute stream,
kernel count, idle gaps, copies), with the kernels whose time changed most.

    python benchmarks/diag_offload_cost.py --budget 4928556544 --out diag.json   # on the GPU
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))

from common import add_model_args, gpu_ms, hf_model, lm_step  # noqa: E402


def profile_summary(step, steps: int = 3) -> dict:
    """Per-step kernel time, kernel count, compute-stream idle time and copies."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path)).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy" and "dur" in e]
    streams = collections.Counter(int((e.get("args") or {}).get("stream", -1)) for e in kernels)
    main = streams.most_common(1)[0][0]
    mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels if e["args"]["stream"] == main)
    busy = sum(b - a for a, b in mine)
    per_name = collections.defaultdict(float)
    for e in kernels:
        per_name[e["name"][:90]] += e["dur"] / steps
    d2h = [e for e in copies if "DtoH" in e.get("name", "")]
    h2d = [e for e in copies if "HtoD" in e.get("name", "")]
    return {
        "kernel_ms": busy / 1e3 / steps,
        "kernels": len(mine) / steps,
        "other_stream_kernels": (len(kernels) - len(mine)) / steps,
        "d2h_ms": sum(e["dur"] for e in d2h) / 1e3 / steps,
        "h2d_ms": sum(e["dur"] for e in h2d) / 1e3 / steps,
        "d2h_copies": len(d2h) / steps,
        "per_name_us": dict(per_name),
    }


def _leaves(host: list, a: float, b: float) -> list:
    """What the CPU ran between ``a`` and ``b`` by self time: each event's overlap with the
    window less that of the events nested in it on its thread (the innermost work)."""
    inside = [x for x in host if x["ts"] < b and x["ts"] + x["dur"] > a]

    def span(x):
        return max(0.0, min(x["ts"] + x["dur"], b) - max(x["ts"], a))

    out = []
    for x in inside:
        lo, hi = x["ts"], x["ts"] + x["dur"]
        kids = [y for y in inside if y is not x and y.get("tid") == x.get("tid")
                and lo <= y["ts"] and y["ts"] + y["dur"] <= hi and y["dur"] < x["dur"]]  # fmt: skip
        tops = [y for y in kids if not any(z is not y and z["ts"] <= y["ts"] and
                y["ts"] + y["dur"] <= z["ts"] + z["dur"] and z["dur"] > y["dur"] for z in kids)]  # fmt: skip
        self_us = span(x) - sum(span(y) for y in tops)
        out.append((round(self_us), x["name"][:70], x["cat"]))
    return sorted(out, key=lambda d: -d[0])


def gaps(step) -> dict:
    """Idle gaps on the compute stream in one profiled step, each blamed on the CPU (the next
    kernel started within 30 us of its launch call: nothing was queued) or on a wait (it was
    launched earlier and waited for an event or another stream), plus the copies' times."""
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    stack = os.environ.get("DIAG_STACK") == "1"  # Python frames too: the gaps' leaf functions
    with torch.profiler.profile(activities=acts, with_stack=stack) as prof:
        step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path)).get("traceEvents", [])
    launch = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "aunch" in e.get("name", ""):
            launch[(e.get("args") or {}).get("correlation")] = e["ts"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    streams = collections.Counter(int(e["args"].get("stream", -1)) for e in kernels)
    main = streams.most_common(1)[0][0]
    mine = sorted((e for e in kernels if e["args"]["stream"] == main), key=lambda e: e["ts"])
    t0 = mine[0]["ts"]
    out = {"cpu_us": 0.0, "wait_us": 0.0, "top": [], "copies": [], "busy_cpu": []}
    host = [
        e
        for e in events
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver", "python_function")
        and "dur" in e
        and e["dur"] > 20
    ]
    memopt_ops = collections.defaultdict(lambda: [0, 0.0])
    for e in host:
        if "memopt" in e.get("name", "") and e.get("cat") == "cpu_op":
            memopt_ops[e["name"]][0] += 1
            memopt_ops[e["name"]][1] += e["dur"]
    out["memopt_cpu_ops"] = {k: (n, round(us)) for k, (n, us) in memopt_ops.items()}
    for prev, e in zip(mine, mine[1:]):
        gap = e["ts"] - (prev["ts"] + prev["dur"])
        if gap < 20:
            continue
        lt = launch.get(e["args"].get("correlation"))
        cause = "cpu" if lt is not None and e["ts"] - lt < 30 else "wait"
        out[f"{cause}_us"] += gap
        out["top"].append((round((e["ts"] - t0) / 1e3, 2), round(gap), cause, e["name"][:60]))
        if cause == "cpu" and gap > 100:
            a, b = prev["ts"] + prev["dur"], e["ts"]
            during = [
                (round(min(x["ts"] + x["dur"], b) - max(x["ts"], a)), x["name"][:50], x["cat"])
                for x in host
                if x["ts"] < b and x["ts"] + x["dur"] > a
            ]
            during.sort(key=lambda d: -d[0])
            out["busy_cpu"].append((round((e["ts"] - t0) / 1e3, 2), round(gap), during[:8]))
            out.setdefault("leaf_cpu", []).append(
                (round((e["ts"] - t0) / 1e3, 2), round(gap), _leaves(host, a, b)[:10])
            )
    out["top"] = sorted(out["top"], key=lambda g: -g[1])[:25]
    for e in events:
        if e.get("cat") == "gpu_memcpy" and "dur" in e:
            kind = "d2h" if "DtoH" in e["name"] else "h2d" if "HtoD" in e["name"] else "other"
            mb = (e.get("args") or {}).get("bytes", 0) / 2**20
            start = round((e["ts"] - t0) / 1e3, 2)
            out["copies"].append((start, round(e["dur"] / 1e3, 2), kind, round(mb, 1)))
    out["copies"].sort()
    out["span_ms"] = (mine[-1]["ts"] + mine[-1]["dur"] - t0) / 1e3
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--budget", default="4928556544")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--ks", default="", help="also offload_layers=k for these k")
    p.add_argument("--parts", action="store_true", help="also the plan's recompute/offload parts")
    p.add_argument("--out")
    args = p.parse_args()

    import memopt

    model = hf_model(args.model, args.layers, args.hidden)
    ids = torch.randint(0, 32000, (args.batch, args.seq), device="cuda")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}

    def run(label, compiled, extra=None):
        step = lm_step(model, compiled, ids)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = gpu_ms(step, args.reps)
        row = {
            "variant": label,
            "ms": statistics.median(times),
            "peak": torch.cuda.max_memory_allocated(),
            **profile_summary(step),
            "gaps": gaps(step),
            **(extra or {}),
        }
        result["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("per_name_us", "gaps")}))
        g = row["gaps"]
        print(
            f"  gaps: cpu {g['cpu_us'] / 1e3:.2f} ms, wait {g['wait_us'] / 1e3:.2f} ms, "
            f"span {g['span_ms']:.2f} ms; largest: {g['top'][:12]}"
        )
        print(f"  copies (start ms, ms, dir, MiB): {g['copies'][:40]}", flush=True)
        print(f"  memopt ops on the CPU (count, us): {g['memopt_cpu_ops']}")
        for item in g["busy_cpu"][:6]:
            print(f"  CPU during the gap at {item[0]} ms ({item[1]} us): {item[2]}", flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f)
        return row

    torch._dynamo.reset()
    base = run("torch.compile", torch.compile(model))
    budget = float(args.budget) if "." in args.budget else int(args.budget)
    torch._dynamo.reset()
    c = memopt.optimize(model, budget=budget)
    rows = [run(f"memopt budget={args.budget}", c)]
    plans = [r.extra.get("planner", {}) for r in memopt.report(c).regions]
    plan = next(p for p in plans if p.get("plan_strings"))
    strings, sync = plan["plan_strings"], plan.get("sync") or {}
    print(json.dumps({"plan_strings": strings, "sync": sync}), flush=True)
    for k in [int(x) for x in args.ks.split(",") if x]:
        torch._dynamo.reset()
        rows.append(run(f"offload_layers={k}", memopt.optimize(model, offload_layers=k)))
    if not args.parts:
        strings = []
    rec = [s for s in strings if s.split(":")[1] != "3"]
    off = [s for s in strings if s.split(":")[1] == "3"]
    sync = {int(k): tuple(v) for k, v in sync.items()}
    if rec:
        torch._dynamo.reset()
        rows.append(run("recompute part", memopt.optimize(model, config=rec), {"config": rec}))
    if off:
        torch._dynamo.reset()
        c = memopt.optimize(model, config=off, sync=sync)
        rows.append(run("offload part", c, {"config": off}))
    for row in rows:
        diff = {
            n: row["per_name_us"].get(n, 0.0) - base["per_name_us"].get(n, 0.0)
            for n in set(row["per_name_us"]) | set(base["per_name_us"])
        }
        top = sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:12]
        print(
            f"\n{row['variant']}: {row['ms'] - base['ms']:+.2f} ms step, "
            f"{row['kernel_ms'] - base['kernel_ms']:+.2f} ms kernels, "
            f"{row['kernels'] - base['kernels']:+.0f} kernels"
        )
        for n, us in top:
            print(f"  {us:+9.1f} us  {n}")


if __name__ == "__main__":
    main()
