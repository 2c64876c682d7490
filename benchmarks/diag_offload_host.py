"""The host's time in cross-region offload (memopt.offload.step_offload): one offloaded run's
saved tensors packed, copied to the host, copied back and unpacked, timed on the CPU without
synchronizing (what the training step's forward and backward threads spend), per phase.

An FSDP2 step whose forward keeps the CPU only just ahead of the GPU pays this time 1:1
(docs/benchmarks.md, twenty-ninth session: an offloaded layer of the 8-layer Llama cost 1.6 ms
on an H200, kernels unchanged)::

    python benchmarks/diag_offload_host.py --tensors 24 --mib 32 --out $OUT/offload_host.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def measure(tensors: int, mib: int, repeats: int, device: str, impl: str = "") -> dict:
    """Median host microseconds per phase, for the run offloaded and, as the base, kept: the
    forward (``tensors`` multiplies, each saving its 32 MiB input), the end of the run (the
    copies to the host issued), the copy-back issued at the next run's backward, and the
    backward (unpacking)."""
    import importlib

    import torch

    StepOffload = importlib.import_module(impl or "memopt.offload.step_offload").StepOffload

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    n = mib * 2**20 // 2
    w = torch.ones((), device=dev, dtype=torch.bfloat16, requires_grad=True)
    out: dict[str, dict[str, list[float]]] = {}
    grads: dict[str, float] = {}
    for mode in ("kept", "offloaded"):
        times: dict[str, list[float]] = {k: [] for k in ("forward", "end", "reload", "backward")}
        for r in range(repeats + 2):  # two warm-ups: the pinned pool, the transfer stream
            torch.manual_seed(r)
            xs = [torch.randn(n, device=dev, dtype=torch.bfloat16) for _ in range(tensors)]
            off = StepOffload([0] if mode == "offloaded" else [], min_bytes=1)
            sync()
            t0 = time.perf_counter()
            with off.run(0, ()):
                ys = [x * w for x in xs]  # each saves x (the forward's saved tensors)
                t1 = time.perf_counter()
            t2 = time.perf_counter()
            del xs
            off.backward_reached(1)  # the next run's backward: the copy-back starts
            t3 = time.perf_counter()
            torch.autograd.backward(ys, [torch.ones_like(y) for y in ys])
            t4 = time.perf_counter()
            sync()
            del ys
            grads[mode], w.grad = w.grad.float().item(), None  # the last repeat's
            if r >= 2:
                for v, dt in zip(times.values(), (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                    v.append(1e6 * dt)
        out[mode] = times
    phases = {}
    for k in out["kept"]:
        kept = statistics.median(out["kept"][k])
        moved = statistics.median(out["offloaded"][k])
        phases[k] = {
            "kept_us": kept,
            "offloaded_us": moved,
            "added_per_tensor_us": (moved - kept) / tensors,
        }
    total = sum(p["offloaded_us"] - p["kept_us"] for p in phases.values())
    same = grads["kept"] == grads["offloaded"]  # the reloaded tensors are the saved ones
    return {"phases": phases, "added_us": total, "added_per_tensor_us": total / tensors,
            "same_gradient": same}  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tensors", type=int, default=24)
    p.add_argument("--mib", type=int, default=32)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--device", default="cuda")
    p.add_argument("--impl", default="", help="a module with another StepOffload (A/B)")
    p.add_argument("--out")
    a = p.parse_args(argv)
    import torch

    got = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "config": vars(a),
        **measure(a.tensors, a.mib, a.repeats, a.device, a.impl),
    }
    print(json.dumps(got, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(got, indent=1))


if __name__ == "__main__":
    main()
