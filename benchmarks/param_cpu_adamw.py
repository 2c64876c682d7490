"""CPUAdamW throughput on the host, against the memory bandwidth and torch's fused CPU AdamW.

    python3 benchmarks/param_cpu_adamw.py [--numel 268435456] [--nvme-dir /path/on/nvme]

Prints, per ``threads`` setting: seconds per update, bytes touched per update (28 B/element: fp32
master r/w, grad r, exp_avg r/w, exp_avg_sq r/w) / time as GB/s, that over the measured triad
bandwidth (the bar: >= 0.7), and the time ratio to torch.optim.AdamW(fused=True) on the CPU.
With ``--nvme-dir``: the NVMe tier's achieved read/write throughput beside a plain sequential
read/write of the same size on that disk.
"""

from __future__ import annotations

import argparse
import time

import torch

from memopt.params import CPUAdamW, sequential_throughput

BYTES_PER_ELEM = 28


def triad_bandwidth(n: int) -> float:
    """STREAM triad ``c = a + s * b`` (3 x 4 B per element), best of 5, bytes/s."""
    a, b, c = torch.rand(n), torch.rand(n), torch.empty(n)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        torch.add(a, b, alpha=0.5, out=c)
        best = min(best, time.perf_counter() - t0)
    return 12 * n / best


def fill_grads(opt: CPUAdamW) -> None:
    for info in opt._infos.values():
        info.has_grad = True
    opt._flats[0]["grad"].normal_()


def time_cpu_adamw(numel: int, reps: int, **kw) -> float:
    p = torch.nn.Parameter(torch.randn(numel))
    opt = CPUAdamW([p], lr=1e-4, **kw)
    best = float("inf")
    for _ in range(reps):
        fill_grads(opt)
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    opt.close()
    return best


def time_torch_fused(numel: int, reps: int) -> float:
    p = torch.nn.Parameter(torch.randn(numel))
    p.grad = torch.randn(numel)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=1 << 28)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--nvme-dir", default=None)
    args = ap.parse_args()
    n = args.numel
    bw = triad_bandwidth(n)
    ref = time_torch_fused(n, args.reps)
    print(
        f"elements {n / 1e6:.0f} M; torch intra-op threads {torch.get_num_threads()}; "
        f"triad bandwidth {bw / 1e9:.1f} GB/s"
    )
    print(
        f"torch.optim.AdamW(fused=True) CPU: {ref * 1e3:.1f} ms "
        f"({BYTES_PER_ELEM * n / ref / 1e9:.1f} GB/s)"
    )
    best_frac = 0.0
    for th in (int(t) for t in args.threads.split(",")):
        t = time_cpu_adamw(n, args.reps, threads=th)
        frac = BYTES_PER_ELEM * n / t / bw
        best_frac = max(best_frac, frac)
        print(
            f"CPUAdamW threads={th}: {t * 1e3:.1f} ms, {BYTES_PER_ELEM * n / t / 1e9:.1f} GB/s, "
            f"fraction of triad {frac:.2f}, time / torch fused {t / ref:.2f}"
        )
    print("bandwidth bar (>= 0.7):", "PASS" if best_frac >= 0.7 else "FAIL")
    if args.nvme_dir:
        opt_kw = dict(nvme_dir=args.nvme_dir, chunk_numel=1 << 24)
        p = torch.nn.Parameter(torch.randn(n))
        opt = CPUAdamW([p], lr=1e-4, **opt_kw)
        for _ in range(2):
            fill_grads(opt)
            t0 = time.perf_counter()
            opt.step()
            t = time.perf_counter() - t0
        tp = opt._stores[0].throughput()
        seq = sequential_throughput(args.nvme_dir, 8 * n)
        print(
            f"NVMe tier: step {t:.2f} s; moments {8 * n / 2**30:.2f} GiB read+written; "
            f"achieved read {tp['read_Bps'] / 1e9:.2f} GB/s, write {tp['write_Bps'] / 1e9:.2f} "
            f"GB/s; plain sequential read {seq['read_Bps'] / 1e9:.2f} GB/s, write "
            f"{seq['write_Bps'] / 1e9:.2f} GB/s"
        )
        opt.close()


if __name__ == "__main__":
    main()
