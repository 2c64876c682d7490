"""Where does cross-region offload's time go under FSDP2? torch.compile and memopt
``offload_layers=k`` on the model of fsdp_step.py, each profiled: compute-stream kernel time,
idle gaps (CPU or wait), the copies' start times and durations.

    torchrun --nproc-per-node 1 benchmarks/diag_step_offload.py --ks 1,2 --out diag.json
    torchrun --nproc-per-node 2 benchmarks/diag_step_offload.py --ks 1,2 --out diag_w2.json

At world size > 1 each rank takes its own rows of one global batch and profiles itself; each
rank writes ``<out>`` with ``.rank<r>`` before the suffix, rows tagged with rank and world.
Idle gaps are blamed on the CPU or on a wait, with what the CPU ran during the CPU ones.

``--waits`` adds, per row, the chain behind each long compute-stream wait
(:mod:`diag_waits`; ``--traces DIR`` keeps rank 0's profiled steps' traces, gzipped).
``--variants`` picks rows: ``compile``, ``k<k>`` (``offload_layers=k``), and experiments on
the copy-back's timing: ``k<k>:nopace`` (the whole copy-back issued at its first point, not
spread over the backward's layer starts) and ``k<k>:prehook`` (a run's backward point is taken
in a hook on its output's autograd node, which runs after FSDP2's pre-backward hook on the
module output, instead of a tensor hook, which runs before it).

    torchrun --nproc-per-node 2 benchmarks/diag_step_offload.py --variants compile,k1,k1:nopace,k1:prehook --waits --traces /tmp/tr --out diag_w2.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
if "LOCAL_RANK" in os.environ:  # private compile caches per rank and world size
    _tag = f"w{os.environ.get('WORLD_SIZE', '1')}_rank{os.environ['LOCAL_RANK']}"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"/tmp/inductor_diag_step_{_tag}"
    os.environ["MEMOPT_CACHE_DIR"] = f"/tmp/memopt_diag_step_{_tag}"

import torch

sys.path.insert(0, os.path.dirname(__file__))

import diag_waits  # noqa: E402
from diag_offload_cost import gaps, profile_summary  # noqa: E402
from fsdp_step import build  # noqa: E402


def main() -> None:
    import torch.distributed as dist

    import memopt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="1,2")
    p.add_argument("--variants", default="", help="compile,k1,k1:nopace,... (overrides --ks)")
    p.add_argument("--waits", action="store_true", help="the chain behind each long wait")
    p.add_argument("--traces", default="", help="folder for the profiled steps' traces")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out", default="diag_step_offload.json")
    args = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("cuda:nccl,cpu:gloo", rank=rank, world_size=world)
    model = build(8, 2048, 32, 8, 8192)
    g = torch.Generator().manual_seed(0)
    full = torch.randint(0, 32000, (world * args.batch, args.seq), generator=g)
    ids = full[rank * args.batch : (rank + 1) * args.batch].cuda()
    if world > 1:
        root, ext = os.path.splitext(args.out)
        args.out = f"{root}.rank{rank}{ext}"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rows = []
    names = args.variants or ",".join(["compile"] + [f"k{k}" for k in args.ks.split(",") if k])
    for name in names.split(","):
        label, experiment = _variant(name)
        torch._dynamo.reset()
        with experiment():
            compiled = (
                torch.compile(model)
                if name == "compile"
                else memopt.optimize(model, offload_layers=int(name[1:].split(":")[0]))
            )
            rows.append(_measure(label, compiled, model, opt, ids, rank, world, args))
        with open(args.out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def _variant(name: str):
    """The row's label and a context manager for its experiment (none: a null context)."""
    import contextlib
    from unittest import mock

    from memopt import regions
    from memopt.offload import step_offload

    if name == "compile":
        return "torch.compile", contextlib.nullcontext
    k, _, how = name[1:].partition(":")
    label = f"offload_layers={k}" + (f" ({how})" if how else "")
    if not how:
        return label, contextlib.nullcontext
    if how == "nopace":  # every share's tensors in the first share
        return label, lambda: mock.patch.object(
            step_offload, "_share", lambda group, shares, j: list(group) if j == 0 else []
        )
    if how == "prehook":

        def on_backward(out, callback):
            for t in out if isinstance(out, list | tuple) else (out,):
                if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
                    t.grad_fn.register_prehook(lambda grads, _cb=callback: _cb())
                    return

        return label, lambda: mock.patch.object(regions, "_on_backward", on_backward)
    raise SystemExit(f"unknown experiment {how!r} in {name!r}")


def _measure(label, compiled, model, opt, ids, rank, world, args) -> dict:

    def step(compiled=compiled):
        opt.zero_grad(set_to_none=True)
        compiled(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    for _ in range(4):
        step()
    t = []
    for _ in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) * 1e3)
    row = {"variant": label, "rank": rank, "world": world, "step_ms": sorted(t)[3]}
    row.update(profile_summary(step))
    row["gaps"] = gaps(step)
    row.pop("per_name_us")
    print(rank, json.dumps({k: v for k, v in row.items() if k != "gaps"}), flush=True)
    g = row["gaps"]
    print(label, "cpu_us", g["cpu_us"], "wait_us", g["wait_us"], "span", g["span_ms"])
    print(" top gaps", g["top"][:8])
    print(" copies", g["copies"][:40])
    if args.waits:
        keep = None
        if args.traces and rank == 0:
            os.makedirs(args.traces, exist_ok=True)
            slug = "".join(c if c.isalnum() else "_" for c in label).strip("_")
            keep = os.path.join(args.traces, f"trace_{slug}_w{world}_r{rank}.json.gz")
        row["waits"] = diag_waits.analyze(diag_waits.profile(step, keep))
        print(label, "waits", json.dumps(row["waits"]["waits"][:4], indent=1), flush=True)
    return row


if __name__ == "__main__":
    main()
