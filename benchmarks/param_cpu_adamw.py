"""The host AdamW against its floor: host memory bandwidth, PCIe, and the update of a real model.

    python3 benchmarks/param_cpu_adamw.py floor   [--gib 1]          # bandwidths, the floor
    python3 benchmarks/param_cpu_adamw.py host    [--size 1b]        # where the update's time goes
    python3 benchmarks/param_cpu_adamw.py all --out results.json     # floor + host

``floor``: host memory copy / read / write bandwidth (torch, all threads, best of 5; a copy
counts bytes read + written) and pinned PCIe H2D / D2H / both at once. The fp32 AdamW floor is
28 B/param (read w, g, m, v; write w, m, v) over the copy bandwidth; + 2 B/param for a bf16
write-back. ``host``: the update of the Llama ``1b`` shapes of ``param_peers.py`` (1.033 B fp32
parameters, all on the host) through torch's fused CPU AdamW, organised as HostAdamW can run it:
one call per parameter or per layer group, on the training thread or a worker, with the worker's
team at several sizes, several workers at once, and beside a pinned DMA load like FSDP2's.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import torch

from memopt._torch_compat import fused_adamw_
from memopt.params.threads import host_cores, set_thread_team

GB = 1e9
SHAPES = {  # per layer group; the root group last (see benchmarks/param_peers.py SIZES)
    "1b": dict(layers=20, hidden=2048, inter=5632, vocab=32000, kv=512),
    "tiny": dict(layers=4, hidden=256, inter=688, vocab=1024, kv=64),
}
ADAMW_BYTES, BF16_WRITEBACK_BYTES = 28, 2


def _best(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def host_bandwidth(gib: float, reps: int = 5) -> dict[str, float]:
    """copy (read + write), read-only (sum) and write-only (fill) bytes/s of host memory."""
    n = int(gib * 2**30) // 4
    a, b = torch.rand(n), torch.empty(n)
    b.fill_(1.0)  # first touch before timing
    return {
        "inplace_GBps": 8 * n / _best(lambda: a.mul_(1.0), reps) / GB,
        "copy_GBps": 8 * n / _best(lambda: b.copy_(a), reps) / GB,
        "read_GBps": 4 * n / _best(lambda: a.sum(), reps) / GB,
        "write_GBps": 4 * n / _best(lambda: b.fill_(2.0), reps) / GB,
    }


def pcie_bandwidth(gib: float = 1.0, reps: int = 5) -> dict[str, float]:
    """Pinned host <-> device bytes/s, one way each and both at once (two streams)."""
    if not torch.cuda.is_available():
        return {}
    n = int(gib * 2**30)
    h1 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    h2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d1, d2 = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty_like(h1, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def run(h2d: bool, d2h: bool):
        def fn():
            if h2d:
                with torch.cuda.stream(s1):
                    d1.copy_(h1, non_blocking=True)
            if d2h:
                with torch.cuda.stream(s2):
                    h2.copy_(d2, non_blocking=True)
            torch.cuda.synchronize()

        return fn

    return {
        "h2d_GBps": n / _best(run(True, False), reps) / GB,
        "d2h_GBps": n / _best(run(False, True), reps) / GB,
        "both_GBps": 2 * n / _best(run(True, True), reps) / GB,
    }


def floor(args) -> dict:
    bw = host_bandwidth(args.gib)
    res = {"cores": host_cores(), "torch_threads": torch.get_num_threads(), **bw}
    res.update(pcie_bandwidth())
    n = _numel(args.size)
    res["params"] = n
    best = max(bw["inplace_GBps"], bw["copy_GBps"])  # AdamW, like a.mul_(), writes what it read
    res["adamw_fp32_floor_s"] = ADAMW_BYTES * n / (best * GB)
    res["adamw_bf16_writeback_floor_s"] = (ADAMW_BYTES + BF16_WRITEBACK_BYTES) * n / (best * GB)
    return res


# ---- the update of a real model ------------------------------------------------------------
def _group_shapes(size: str) -> list[list[tuple[int, ...]]]:
    s = SHAPES[size]
    h, i, kv = s["hidden"], s["inter"], s["kv"]
    layer = [(h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i), (h,), (h,)]
    return [layer] * s["layers"] + [[(s["vocab"], h), (s["vocab"], h), (h,)]]


def _numel(size: str) -> int:
    return sum(torch.Size(sh).numel() for g in _group_shapes(size) for sh in g)


class Model:
    """fp32 w, g, m, v per parameter, grouped as FSDP2 groups them."""

    def __init__(self, size: str) -> None:
        self.groups = []
        for shapes in _group_shapes(size):
            ts = [[torch.randn(sh) for sh in shapes] for _ in range(2)]
            ms = [torch.zeros(sh) for sh in shapes]
            vs = [torch.zeros(sh).add_(1e-4) for sh in shapes]
            self.groups.append((ts[0], ts[1], ms, vs))
        self.numel = sum(w.numel() for g in self.groups for w in g[0])
        self.step = 0

    def update(self, gi: int, per_param: bool) -> None:
        w, g, m, v = self.groups[gi]
        st = [torch.tensor(float(self.step + 1)) for _ in w]
        kw = dict(lr=1e-4, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, maximize=False)
        if per_param:
            for args in zip(w, g, m, v, st):
                fused_adamw_(*([a] for a in args), **kw)
        else:
            fused_adamw_(w, g, m, v, st, **kw)


def _on_worker(n_workers: int, team: int | None, fn, reps: int = 3) -> float:
    """Best time of ``fn(i)`` run on ``n_workers`` fresh threads at once, each with a team of
    ``team`` threads (None: torch's count); the first run is a warm-up."""
    times = []
    for _ in range(reps + 1):
        ready = threading.Barrier(n_workers + 1)

        def body(i: int, ready: threading.Barrier = ready) -> None:
            set_thread_team(team)
            ready.wait()
            fn(i)

        threads = [threading.Thread(target=body, args=(i,)) for i in range(n_workers)]
        for t in threads:
            t.start()
        ready.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        times.append(time.perf_counter() - t0)
    return min(times[1:])


class DmaLoad:
    """Pinned H2D and D2H copies on two streams, back to back, until stopped (FSDP2's traffic)."""

    def __init__(self, mib: int = 256) -> None:
        n = mib << 20
        self.h = [torch.empty(n, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.d = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(2)]
        self.bytes, self.stop = 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        t0 = time.perf_counter()
        while not self.stop.is_set():
            with torch.cuda.stream(s1):
                self.d[0].copy_(self.h[0], non_blocking=True)
            with torch.cuda.stream(s2):
                self.h[1].copy_(self.d[1], non_blocking=True)
            torch.cuda.synchronize()
            self.bytes += 2 * self.h[0].numel()
        self.seconds = time.perf_counter() - t0

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def host(args) -> dict:
    model = Model(args.size)
    n, ng = model.numel, len(model.groups)
    res: dict = {"params": n, "cores": host_cores(), "torch_threads": torch.get_num_threads()}

    def all_groups(per_param: bool):
        return lambda: [model.update(gi, per_param) for gi in range(ng)]

    def split(k: int, per_param: bool = False):
        return lambda w: [model.update(gi, per_param) for gi in range(w, ng, k)]

    res["main_per_param_s"] = _best(all_groups(True), 3)
    res["main_per_group_s"] = _best(all_groups(False), 3)
    res["worker_per_param_s"] = _on_worker(1, None, lambda _: all_groups(True)())
    res["worker_per_group_s"] = _on_worker(1, None, lambda _: all_groups(False)())
    cores = host_cores()
    for team in sorted({max(1, cores - 1), max(1, cores // 2), max(1, cores // 4)}):
        res[f"worker_team{team}_s"] = _on_worker(1, team, split(1))
    for k in (2, 4):
        res[f"workers{k}_team{max(1, cores // k)}_s"] = _on_worker(k, max(1, cores // k), split(k))
    if torch.cuda.is_available():
        for team in (None, host_cores() - 1):
            with DmaLoad() as load:
                t = _on_worker(1, team, split(1))
            res[f"worker_team{team or 'default'}_with_dma_s"] = t
            res[f"dma_GBps_during_team{team or 'default'}"] = load.bytes / load.seconds / GB
    res.update(bf16_writeback(model, args.chunks))
    for key in [k for k in res if k.endswith("_s")]:
        res[key[:-2] + "_GBps"] = ADAMW_BYTES * n / res[key] / GB
    return res


def bf16_writeback(model: Model, chunks: str) -> dict:
    """bf16 gradient in, fp32 master / m / v updated, bf16 copy out (HostAdamW's path for bf16
    host shards): ``adamw_kernel.torch_update`` in pieces of each size in ``chunks``."""
    from memopt.params import adamw_kernel as k

    g16 = [[g.bfloat16() for g in grp[1]] for grp in model.groups]
    out = [[torch.empty_like(w, dtype=torch.bfloat16) for w in grp[0]] for grp in model.groups]
    s = k.AdamWStep(lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=3)
    res, saved = {}, k.CHUNK
    for chunk in (int(c) for c in chunks.split(",")):
        k.CHUNK = chunk
        scratch = torch.empty(chunk)

        def run(scratch: torch.Tensor = scratch) -> None:
            for (w, _, m, v), gs, os_ in zip(model.groups, g16, out):
                for args in zip(w, gs, m, v, os_):
                    k.torch_update(*(a.view(-1) for a in args), s, scratch)

        res[f"bf16_writeback_chunk{chunk}_s"] = _on_worker(1, None, lambda _: run())
    k.CHUNK = saved
    return res


def _table(res: dict) -> str:
    lines = []
    for k, v in res.items():
        if isinstance(v, float):
            lines.append(f"{k:48s} {v:10.4f}")
        elif not isinstance(v, dict):
            lines.append(f"{k:48s} {v}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["floor", "host", "all"])
    ap.add_argument("--size", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunks", default="1048576,4194304,16777216,1073741824")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = {"torch": torch.__version__}
    if args.mode in ("floor", "all"):
        res["floor"] = floor(args)
    if args.mode in ("host", "all"):
        res["host"] = host(args)
    for key, val in res.items():
        if isinstance(val, dict):
            print(f"== {key}\n{_table(val)}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
