"""Do host copies slow FSDP2's collectives? Each rank all-gathers a layer-sized bf16 shard,
alone and while a side stream copies 128 MiB blocks to or from pinned host memory (what
memopt's activation offload does during a step); reports both bandwidths per rank.

    torchrun --nproc-per-node 2 benchmarks/diag_collective_pcie.py --out coll.json

If the GPUs talk over PCIe (``nvidia-smi topo -m``: PIX/PXB/PHB/SYS, not NV#), the
all-gather and the host copies share the links and each slows the other.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MiB = 2**20


def _time(fn, iters: int) -> float:
    """Seconds per call, CUDA events, after 3 warm-ups."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shard-mib", type=int, default=61, help="per-rank all-gather input")
    p.add_argument("--copy-mib", type=int, default=128)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default="diag_collective_pcie.json")
    a = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    shard = torch.ones(a.shard_mib * MiB // 2, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(world * shard.numel(), dtype=shard.dtype, device="cuda")
    dev = torch.empty(a.copy_mib * MiB, dtype=torch.uint8, device="cuda")
    host = torch.empty(a.copy_mib * MiB, dtype=torch.uint8, pin_memory=True)
    side = torch.cuda.Stream()

    def gather():
        dist.all_gather_into_tensor(out, shard)

    gather_bytes = out.numel() * out.element_size()
    row = {"rank": rank, "world": world, "gather_mib": gather_bytes / MiB}
    row["gather_alone_ms"] = _time(gather, a.iters) * 1e3
    for kind in ("d2h", "h2d"):
        copy = (
            (lambda: host.copy_(dev, non_blocking=True))
            if kind == "d2h"
            else (lambda: dev.copy_(host, non_blocking=True))
        )
        with torch.cuda.stream(side):
            row[f"{kind}_alone_GBps"] = a.copy_mib * MiB / _time(copy, a.iters) / 1e9
        dist.barrier()
        torch.cuda.synchronize()
        with torch.cuda.stream(side):  # copies queued for longer than the gathers run
            for _ in range(4 * a.iters):
                copy()
        row[f"gather_with_{kind}_ms"] = _time(gather, a.iters) * 1e3
        torch.cuda.synchronize()
    row["slowdown_d2h"] = row["gather_with_d2h_ms"] / row["gather_alone_ms"]
    row["slowdown_h2d"] = row["gather_with_h2d_ms"] / row["gather_alone_ms"]
    print(json.dumps(row), flush=True)
    root, ext = os.path.splitext(a.out)
    with open(f"{root}.rank{rank}{ext}", "w") as f:
        json.dump(row, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
