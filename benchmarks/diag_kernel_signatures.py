"""How many kernels does ``time_kernels`` time per zoo model, and how long would timing the
reductions take? Per model: the reduction nodes of the joint, forward and backward graphs,
their distinct signatures (what :mod:`memopt.kernel_times` times, once each), the other timed
signatures (matmuls, attention, convolutions), and the seconds ``time_kernel`` takes for every
reduction signature on this machine's CPU (real tensors of the graphs' sizes).

    python benchmarks/diag_kernel_signatures.py --out docs/data/kernel_signatures_tiny.json
    python benchmarks/diag_kernel_signatures.py --size gpu --dtype bfloat16 \
        --out docs/data/kernel_signatures_gpu.json

The graphs come from ``memopt plan``'s fake trace (:mod:`memopt.cli.trace`, a ``cuda`` plan
emulated on the CPU: the joint graph training compiles, at static sizes), so no model runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import zoo  # noqa: E402
from benchmarks import zoo_models as zm  # noqa: E402
from memopt import facts  # noqa: E402
from memopt import kernel_times as kt  # noqa: E402
from memopt.cli.errors import CliError  # noqa: E402
from memopt.cli.models import Built  # noqa: E402
from memopt.cli.trace import trace  # noqa: E402
from memopt.config import MemoptConfig  # noqa: E402


def count(name: str, size: str, dtype: torch.dtype, timing: bool) -> dict:
    """The signature counts of one zoo model (and the CPU seconds to time its reductions)."""
    with torch.device("meta"):  # weights and float inputs in ``dtype``, as the GPU zoo runs
        model, inputs = zoo.build(zm.BY_NAME[name], size, "meta", dtype)
    result = trace(
        Built(model.train(), kwargs=inputs),
        [MemoptConfig()],
        device_kind="cuda",
        keep_planner=True,
        dynamic=False,
        emulate_cuda=True,
    )
    nodes, reductions, others = 0, {}, {}
    for p in result.planner:

        def value(e, s=p.symbols):
            return s.evaluate(s.readable(e))

        for sig, n in kt.signatures((p.joint, p.fw, p.bw), value).items():
            (reductions if facts.is_reduction(n) else others).setdefault(sig, (n, value))
        nodes += sum(facts.is_reduction(n) for g in (p.joint, p.fw, p.bw) for n in g.graph.nodes)
    row = {
        "model": name,
        "regions": len(result.planner),
        "reduction_nodes": nodes,
        "reduction_signatures": len(reductions),
        "other_signatures": len(others),
        "ops": sorted({str(n.target) for n, _ in reductions.values()}),
    }
    if timing:
        t0, failed = time.perf_counter(), 0
        for n, value in reductions.values():
            failed += kt.time_kernel(n, torch.device("cpu"), value) is None
        row["cpu_timing_s"] = round(time.perf_counter() - t0, 3)
        row["not_runnable_alone"] = failed
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--models", default="llama,mixtral,gemma2,bert,t5,vit,swin,resnet,convnext,whisper"
    )
    ap.add_argument("--size", default="tiny", choices=zm.SIZES)
    ap.add_argument("--dtype", default="float32", help="weights and float inputs: bfloat16, ...")
    ap.add_argument("--no-time", dest="timing", action="store_false")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = []
    for name in args.models.split(","):
        if not zm.available(zm.BY_NAME[name]):
            print(f"{name}: its package is not installed here")
            continue
        try:
            row = count(name, args.size, dtype, args.timing)
        except CliError as e:  # a model the fake trace cannot run: named, the others go on
            row = {"model": name, "error": str(e)[:200]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    data = {
        "size": args.size,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
