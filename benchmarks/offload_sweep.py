"""Activation offload on a GPU: offload k of n layers (memopt.optimize(offload_layers=k)).

Prints, per k: peak memory, median step time, bytes offloaded per step, the transfer budget
(pinned D2H bandwidth measured here x forward time) and the offload efficiency (compile step
time / offload step time); then gradient equality with the run without offload, and memory
growth over many steps.

    python benchmarks/offload_sweep.py llama --ks 2,4,6 --steps 50
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import gib, hf_model, step_stats  # noqa: E402

import memopt  # noqa: E402

CONFIGS = {"gpt2": ("gpt2", 12, 768, 8, 1024), "llama": ("llama", 8, 2048, 4, 2048)}


def pinned_d2h_gbs(nbytes: int = 1 << 30) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return 5 * nbytes / (time.perf_counter() - t0) / 1e9


def fwd_ms(compiled, ids) -> float:
    with torch.no_grad():
        for _ in range(2):
            compiled(input_ids=ids)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            compiled(input_ids=ids)
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / 5 * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=sorted(CONFIGS))
    p.add_argument("--ks", default="2,4,6")
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    name, layers, hidden, batch, seq = CONFIGS[args.model]
    model = hf_model(name, layers, hidden)
    ids = torch.randint(0, 32000, (batch, seq), device="cuda")
    bw = pinned_d2h_gbs()
    print(f"{args.model} {layers}L h{hidden} b{batch}x{seq} bf16; pinned D2H {bw:.1f} GB/s")

    def step_fn(c):
        def step():
            model.zero_grad(set_to_none=True)
            c(input_ids=ids, labels=ids).loss.backward()

        return step

    torch._dynamo.reset()
    base = memopt.optimize(model)
    base_ms, base_peak = step_stats(step_fn(base))
    f_ms = fwd_ms(torch.compile(model), ids)
    print(
        f"no offload: {base_ms:.1f} ms, peak {gib(base_peak)} GiB; forward {f_ms:.1f} ms; "
        f"transfer budget {bw * f_ms / 1e3:.2f} GB per forward"
    )
    torch.manual_seed(0)
    step_fn(base)()
    ref = [q.grad.clone() for q in model.parameters()]
    print(
        "| k | peak GiB | peak drop GiB | offloaded GiB/step | step ms | efficiency | "
        "offloaded/budget |"
    )
    print("|---|---|---|---|---|---|---|")
    last = None
    for k in [int(x) for x in args.ks.split(",")]:
        torch._dynamo.reset()
        c = memopt.optimize(model, offload_layers=k)
        ms, peak = step_stats(step_fn(c))
        off = memopt.report(c).offloaded_bytes()
        print(
            f"| {k} | {gib(peak)} | {gib(base_peak - peak)} | {off / 2**30:.2f} | {ms:.1f} | "
            f"{base_ms / ms:.3f} | {off / 1e9 / (bw * f_ms / 1e3):.2f} |",
            flush=True,
        )
        last = c
    torch.manual_seed(0)
    step_fn(last)()
    same = all(torch.equal(a, q.grad) for a, q in zip(ref, model.parameters()))
    diff = max(
        (a.float() - q.grad.float()).abs().max().item() for a, q in zip(ref, model.parameters())
    )
    print(f"gradients bitwise equal to no offload (k={k}): {same}; max abs diff {diff:.3e}")
    step = step_fn(last)
    torch.cuda.synchronize()
    a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    a1, r1 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    print(f"{args.steps} steps: allocated {a0} -> {a1} B, reserved {r0} -> {r1} B")
    print(memopt.report(last).regions[0].extra.get("offload", {}).get("text", "")[:3000])


if __name__ == "__main__":
    main()
