"""Host<->GPU copy rates of each GPU alone and of all GPUs at once (do ranks share the link?).

    torchrun --nproc-per-node 2 benchmarks/diag_pcie.py --out pcie.json

Each rank copies ``--gib`` GiB between its GPU and a pinned host buffer, ``--reps`` times each
way: first each rank alone (the others wait at a barrier), then all ranks at once.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def rate(dst: torch.Tensor, src: torch.Tensor, reps: int) -> float:
    dst.copy_(src, non_blocking=True)  # warm
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return reps * src.numel() * src.element_size() / (time.perf_counter() - t0) / 1e9


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default="pcie.json")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    n = int(args.gib * 2**30)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    res: dict = {"rank": rank, "alone": {}, "together": {}}
    for r in range(world):
        dist.barrier()
        if r == rank:
            res["alone"] = {"d2h": rate(host, dev, args.reps), "h2d": rate(dev, host, args.reps)}
    for way, (dst, src) in {"d2h": (host, dev), "h2d": (dev, host)}.items():
        dist.barrier()
        res["together"][way] = rate(dst, src, args.reps)
    out = [None] * world
    dist.all_gather_object(out, res)
    if rank == 0:
        doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "ranks": out}
        doc["date"] = time.strftime("%Y-%m-%d")
        print(json.dumps(doc, indent=1))
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
