"""Three ways to time the graph's kernels, per signature (issue 16, thirty-ninth session).

``benchmarks/diag_prices.py`` found the planner's price of whole vision steps 1.2-1.9× the
kernels that run, and split it by kind on an H200: ConvNeXt's reductions priced at 15.0 ms a
step against 2.85 ms of reduction kernels profiled, its matmuls 8.5 against 3.7 ms, Swin's
reductions 15.9 against 5.0 ms. Every timed price is one op run alone in eager mode
(:func:`memopt.kernel_times.time_kernel`). This script times each distinct signature of a zoo
model's forward and backward graphs three ways on the device:

* ``issued``: as the planner does, each run issued by the host one after another;
* ``queued``: the same eager op, its runs queued behind a GPU sleep (no host dispatch in them);
* ``compiled``: the op alone compiled by Inductor, queued the same way: the kernel Inductor
  writes for it (a Triton reduction rather than aten's, a copy fused in front of a matmul).

and sums each way over the graphs' nodes by kind, to set beside the profiled step::

    python benchmarks/diag_kernel_timing.py --models convnext,swin,mistral --json $OUT/kt.json

The graphs come from ``memopt plan``'s fake trace (no model runs); ``--device cpu --size
tiny`` checks the script here (there ``queued`` is ``issued``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import zoo  # noqa: E402
from benchmarks import zoo_models as zm  # noqa: E402
from benchmarks.diag_prices import node_kind  # noqa: E402
from memopt import _torch_compat as compat  # noqa: E402
from memopt import kernel_times as kt  # noqa: E402
from memopt.cli.models import Built  # noqa: E402
from memopt.cli.trace import trace  # noqa: E402
from memopt.config import MemoptConfig  # noqa: E402

WAYS = ("issued", "queued", "compiled")


def graph_signatures(name: str, size: str, dtype: torch.dtype) -> list[dict]:
    """Each distinct timed signature of the model's forward and backward graphs: one node of
    it, its size function and how many nodes share it there (what the planner prices)."""
    with torch.device("meta"):
        model, inputs = zoo.build(zm.BY_NAME[name], size, "meta", dtype)
    result = trace(
        Built(model.train(), kwargs=inputs),
        [MemoptConfig()],
        device_kind="cuda",
        keep_planner=True,
        dynamic=False,
        emulate_cuda=True,
    )
    rows: dict[str, dict] = {}
    for p in result.planner:

        def value(e, s=p.symbols):
            return s.evaluate(s.readable(e))

        for g in (p.fw, p.bw):
            for node in g.graph.nodes:
                if not kt.timed(node):
                    continue
                sig = kt.signature(node, value)
                if sig is None:
                    continue
                row = rows.setdefault(sig, {"node": node, "value": value, "count": 0})
                row["count"] += 1
    return list(rows.values())


def _queued(fn, device: torch.device, repeats: int) -> float:
    """Fastest of ``repeats`` runs of ``fn``, each run's events queued behind a GPU sleep."""
    t0 = time.perf_counter()
    fn()
    issue = time.perf_counter() - t0
    torch.cuda.synchronize(device)
    compat.gpu_sleep(min(2.0 * (repeats * 3 * issue + 1e-4), 0.2) * kt.SLEEP_CYCLES_PER_S)
    ev = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in ev:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return min(s.elapsed_time(e) for s, e in ev) / 1e3


def time_compiled(node, device: torch.device, value) -> float | None:
    """The op alone compiled by Inductor (:func:`memopt._torch_compat.kernels.inductor_op`),
    timed queued (on a CPU, issued)."""
    from memopt._torch_compat.kernels import inductor_op

    try:
        with compat.real_tensors(), torch.no_grad():
            args, kwargs = kt.real_args(node, device, value)
            fn = inductor_op(node.target, args, kwargs)
            for _ in range(3):
                fn()
            if device.type != "cuda":
                samples = []
                for _ in range(kt.REPEATS):
                    t0 = time.perf_counter()
                    fn()
                    samples.append(time.perf_counter() - t0)
                return min(samples)
            return _queued(fn, device, kt.REPEATS)
    except Exception as e:  # noqa: BLE001 - a diagnostic: the row says it did not compile
        print(f"  not compiled: {node.target} ({type(e).__name__}: {str(e)[:120]})")
        return None


def time_eager(node, device: torch.device, value, way: str) -> float | None:
    """The planner's own timing of the op, issued or queued."""
    old = os.environ.get(kt.TIMING_ENV)
    os.environ[kt.TIMING_ENV] = way
    try:
        return kt.time_kernel(node, device, value)
    except kt.NoMemory:
        return None
    finally:
        if old is None:
            os.environ.pop(kt.TIMING_ENV, None)
        else:
            os.environ[kt.TIMING_ENV] = old


def one_model(name: str, size: str, device: torch.device, dtype, deadline: float) -> dict:
    t0 = time.perf_counter()
    sigs = graph_signatures(name, size, dtype)
    traced_s = time.perf_counter() - t0
    rows, totals = [], {w: collections.Counter() for w in WAYS}
    covered = collections.Counter()  # nodes per kind timed all three ways
    for s in sorted(sigs, key=lambda r: -r["count"]):
        node, value, n = s["node"], s["value"], s["count"]
        kind = node_kind(node)
        row = {"kind": kind, "op": str(node.target), "count": n}
        row["issued"] = time_eager(node, device, value, "issued")
        row["queued"] = time_eager(node, device, value, "queued")
        late = time.perf_counter() - t0 > deadline
        row["compiled"] = None if late else time_compiled(node, device, value)
        row["signature"] = kt.signature(node, value)[:300]
        rows.append(row)
        if all(row[w] is not None for w in WAYS):
            covered[kind] += n
            for w in WAYS:
                totals[w][kind] += n * row[w]
    return {
        "model": name,
        "size": size,
        "trace_s": round(traced_s, 1),
        "seconds": round(time.perf_counter() - t0, 1),
        "signatures": len(sigs),
        "nodes_covered": dict(covered),
        "totals_s": {w: dict(totals[w]) for w in WAYS},
        "rows": rows,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnext,swin,mistral")
    ap.add_argument("--size", default="gpu", choices=zm.SIZES)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds of compiles a model")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = {"device": a.device, "torch": torch.__version__, "models": []}
    if device.type == "cuda":
        out["device"] = torch.cuda.get_device_name(device)
    for name in a.models.split(","):
        r = one_model(name, a.size, device, dtype, a.deadline)
        out["models"].append(r)
        print(f"{name}: {r['signatures']} signatures, {r['seconds']} s; per step, ms:")
        print(f"  {'kind':10s} {'nodes':>6s} " + " ".join(f"{w:>9s}" for w in WAYS))
        for kind in sorted(r["nodes_covered"]):
            ms = " ".join(f"{1e3 * r['totals_s'][w].get(kind, 0):9.3f}" for w in WAYS)
            print(f"  {kind:10s} {r['nodes_covered'][kind]:6d} {ms}")
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
