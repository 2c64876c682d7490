"""Where the reserved bytes of a step under CUDA graphs go (issue 16: memopt's budget at torch's
reserved bytes under ``mode="reduce-overhead"`` reserved 11.5% more than its target, fifty-fifth
session, with no model of the graphs' private pools).

Builds a zoo model at its GPU size (benchmarks/zoo_models.py), compiles it one way (``--variant``:
``compile``, ``torch=0.5`` for torch's activation memory budget, ``budget=BYTES``, ``level1`` or
``offload=K`` for memopt), runs ``--steps`` forward+backward steps under ``--mode`` and after each
step reads the allocator: allocated, its peak, reserved, its peak. After the last step it groups
the allocator's segments by memory pool and stream (the snapshot's ``segment_pool_id`` and
``stream``): segments, reserved bytes and the bytes allocated in them. ``--history N`` records step
N's allocations and lists what is live at its peak. One variant per process::

    python benchmarks/diag_graph_pool.py --model llama --variant budget=6471811072 \
        --mode reduce-overhead --json $OUT/pool.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)


def compiled_model(model, variant: str, mode: str | None):
    import torch

    import memopt

    kw = {"mode": mode} if mode else {}
    if variant == "compile":
        return torch.compile(model, **kw)
    if variant.startswith("torch="):
        torch._functorch.config.activation_memory_budget = float(variant.split("=")[1])
        return torch.compile(model, **kw)
    if variant == "level1":
        return memopt.optimize(model, level=1, **kw)
    if variant.startswith("offload="):
        return memopt.optimize(model, offload_layers=int(variant.split("=")[1]), **kw)
    if variant.startswith("budget="):
        return memopt.optimize(model, budget=int(float(variant.split("=")[1])), **kw)
    raise SystemExit(f"unknown variant {variant!r}")


def pools(snapshot: dict) -> list[dict]:
    """Segments grouped by (pool, stream): how many, reserved and allocated bytes."""
    groups: dict[tuple, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for seg in snapshot["segments"]:
        key = (str(seg.get("segment_pool_id")), int(seg.get("stream", 0)))
        g = groups[key]
        g[0] += 1
        g[1] += seg["total_size"]
        g[2] += seg["allocated_size"]
        g[3] = max(g[3], seg["total_size"])
    return [
        {
            "pool": k[0],
            "stream": k[1],
            "segments": v[0],
            "reserved": v[1],
            "allocated": v[2],
            "largest_segment": v[3],
        }  # fmt: skip
        for k, v in sorted(groups.items(), key=lambda kv: -kv[1][1])
    ]


def _live_at_peak(snap: dict, base: int, top: int) -> list[dict]:
    """The recorded step's allocation peak and the blocks live there, by allocating frame."""
    from benchmarks.diag_peak import replay

    best, blocks = replay(snap, base)
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for size, where in blocks:
        groups[where].append(size)
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:top]
    print(f"recorded step: peak {best:,} from {base:,} before it")
    for w, sizes in rows:
        print(f"  {sum(sizes) / 2**20:9.1f} MiB x{len(sizes):<4} {w[:200]}")
    return [{"peak": best, "base": base}] + [
        {"bytes": sum(v), "blocks": len(v), "where": w} for w, v in rows
    ]


def main(argv=None) -> None:
    import torch

    import memopt
    from benchmarks.zoo import build
    from benchmarks.zoo_gpu import _memopt_facts
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama")
    ap.add_argument("--variant", default="compile")
    ap.add_argument("--mode", default="reduce-overhead", help="torch.compile's mode ('' for none)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--history", type=int, default=-1, help="record this step's allocations")
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[args.model], "gpu", "cuda", torch.bfloat16)
        compiled = compiled_model(model, args.variant, args.mode or None)
        steps, live = [], []
        for i in range(args.steps):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            if i == args.history:
                base = torch.cuda.memory_allocated()
                torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="all")
            step_loss(compiled(**inputs)).backward()
            torch.cuda.synchronize()
            if i == args.history:
                live = _live_at_peak(torch.cuda.memory._snapshot(), base, args.top)
                torch.cuda.memory._record_memory_history(enabled=None)
            steps.append({
                "step": i,
                "allocated": torch.cuda.memory_allocated(),
                "max_allocated": torch.cuda.max_memory_allocated(),
                "reserved": torch.cuda.memory_reserved(),
                "max_reserved": torch.cuda.max_memory_reserved(),
            })  # fmt: skip
            print(json.dumps(steps[-1]), flush=True)
    snap = torch.cuda.memory._snapshot()
    out = {
        "model": args.model,
        "variant": args.variant,
        "mode": args.mode,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "memopt_commit": os.environ.get("MEMOPT_COMMIT"),
        "steps": steps,
        "pools": pools(snap),
        "history_step": args.history,
        "live_at_peak": live,
    }
    if args.variant == "level1" or args.variant.split("=")[0] in ("budget", "offload"):
        facts = _memopt_facts(compiled)
        out["memopt"] = {k: facts.get(k) for k in ("predicted_peak", "offloaded_bytes", "feasible")}
        out["report"] = str(memopt.report(compiled))
    for p in out["pools"]:
        print(f"  pool {p['pool']:>12} stream {p['stream']:>16x}: {p['segments']:4d} segments, "
              f"reserved {p['reserved'] / 2**20:9.1f} MiB, allocated {p['allocated'] / 2**20:9.1f}"
              f" MiB, largest {p['largest_segment'] / 2**20:.1f} MiB")  # fmt: skip
    print(json.dumps(out.get("memopt")))
    if "report" in out:
        print(out["report"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
