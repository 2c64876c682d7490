"""Where gradient clipping spends its time on the host: the pieces, each timed alone.

    python3 benchmarks/clip_host.py [--size 1b] [--threads 0] [--out clip_host.json]

The 1b Llama of ``param_peers.py`` as plain CPU tensors (bf16 gradients, fp32 buffers, fp32
masters and moments), no GPU. Each row is the best of ``--reps`` runs:

* ``torch_clip_bf16``: ``torch.nn.utils.clip_grad_norm_`` on the bf16 gradients (what FSDP2's
  CPU offload users run);
* ``memopt_norm_sources`` / ``torch_norm_fp32`` / ``memopt_scale``: the three pieces of
  ``HostAdamW.clip_grad_norm_`` on bf16 host shards (fill the fp32 buffers from ``.grad``, torch's
  fp32 norm of them, scale them and write the bf16 rounding), then their sum;
* ``native_sumsq_bf16`` / ``native_sumsq_fp32``: the C sum of squares (one read);
* ``native_update_bf16``: the C AdamW update of all of it (bf16 gradient, bf16 write-back);
* ``*_worker``: the same called from a second thread, as HostAdamW's worker does, while the
  main thread's torch pool is warm.

The floor is bytes over the host's bandwidth: ``triad_GBps`` (12 B/element) is measured here.
"""

from __future__ import annotations

import argparse
import json
import threading

import torch
from param_peers import _best  # benchmarks/ is on sys.path when run as a script

from memopt.params import adamw_native as an
from memopt.params.clip import total_norm

SIZES = {
    "1b": dict(layers=20, hidden=2048, inter=5632, vocab=32000, kv=512),
    "tiny": dict(layers=2, hidden=256, inter=688, vocab=1024, kv=64),
}


def shapes(size: str) -> list[int]:
    s = SIZES[size]
    h, i, kv = s["hidden"], s["inter"], s["kv"]
    layer = [h * h, kv * h, kv * h, h * h, i * h, i * h, h * i, h, h]
    return [s["vocab"] * h] + layer * s["layers"] + [h, s["vocab"] * h]


def _on_thread(fn):
    def run():
        t = threading.Thread(target=fn)
        t.start()
        t.join()

    return run


def _triad(n: int = 1 << 27) -> float:
    a, b, c = torch.empty(n), torch.randn(n), torch.randn(n)
    return 12 * n / _best(lambda: torch.add(b, c, alpha=0.5, out=a), 3) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1b", choices=sorted(SIZES))
    ap.add_argument("--threads", type=int, default=0, help="C threads (0: torch's count)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="clip_host.json")
    args = ap.parse_args()
    nt = args.threads or torch.get_num_threads()
    sizes = shapes(args.size)
    n = sum(sizes)
    g16 = [torch.randn(k).bfloat16() for k in sizes]
    acc = [torch.empty(k) for k in sizes]
    w, m, v = ([torch.randn(k) for k in sizes] for _ in range(3))
    out16 = [torch.empty(k, dtype=torch.bfloat16) for k in sizes]
    params = [torch.nn.Parameter(torch.empty(k, dtype=torch.bfloat16)) for k in sizes]
    res = {
        "numel": n,
        "tensors": len(sizes),
        "threads": nt,
        "torch_threads": torch.get_num_threads(),
    }
    res["triad_GBps"] = _triad()

    def torch_clip():
        for p, g in zip(params, g16):
            p.grad = g
        torch.nn.utils.clip_grad_norm_(params, 1e9)  # coef 1: the values stay

    res["torch_clip_bf16_s"] = _best(torch_clip, args.reps)
    res["torch_norm_bf16_s"] = _best(lambda: total_norm(g16), args.reps)
    if an.available():
        res["memopt_norm_sources_s"] = _best(
            lambda: an.acc_pass(acc, g16, 1, threads=nt), args.reps
        )
        res["torch_norm_fp32_s"] = _best(lambda: total_norm(acc), args.reps)
        res["memopt_scale_s"] = _best(lambda: an.acc_pass(acc, None, 0, None, out16, nt), args.reps)
        res["memopt_clip_sum_s"] = (
            res["memopt_norm_sources_s"] + res["torch_norm_fp32_s"] + res["memopt_scale_s"]
        )
        hp = torch.tensor([0.1, 0.999, 0.001, 1e-8, 1.0, -1e-4, 1.0, 1.0])
        upd = lambda: an.group_update(w, g16, m, v, out16, [hp] * len(sizes), nt)  # noqa: E731
        res["native_update_bf16_s"] = _best(upd, args.reps)
        res["native_update_bf16_worker_s"] = _best(_on_thread(upd), args.reps)
        src = lambda: an.acc_pass(acc, g16, 1, threads=nt)  # noqa: E731
        res["memopt_norm_sources_worker_s"] = _best(_on_thread(src), args.reps)
        if hasattr(an, "sumsq"):
            res["native_sumsq_bf16_s"] = _best(lambda: an.sumsq(g16, nt), args.reps)
            res["native_sumsq_fp32_s"] = _best(lambda: an.sumsq(acc, nt), args.reps)
            res["native_sumsq_bf16_worker_s"] = _best(_on_thread(lambda: an.sumsq(g16, nt)), args.reps)  # fmt: skip
    print(json.dumps(res, indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
