"""GPU measurements for layer offload + CPUAdamW on a Llama-style model (random weights).

    python3 benchmarks/param_offload.py capped     # model 4x larger than the capped GPU trains
    python3 benchmarks/param_offload.py overhead   # param_offload=0.5 step time vs no offload
    python3 benchmarks/param_offload.py reserved   # memory_reserved over 100 steps, arena vs not
    python3 benchmarks/param_offload.py all

Each prints a few ``key: value`` lines and ends with ``PASS``/``FAIL`` against the issue's bar.
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from memopt.params import CPUAdamW, apply_param_offload, format_placement

GiB = 2**30


def llama(layers: int, hidden: int, inter: int, vocab: int = 32000, heads: int = 16):
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 4,
        max_position_embeddings=4096,
    )
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def batches(n: int, bs: int, seq: int, vocab: int = 32000):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (bs, seq), generator=g) for _ in range(n)]


def step(model, x, opt=None):
    x = x.cuda(non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, labels=x).loss
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss


def pcie_h2d_bandwidth(nbytes: int = GiB) -> float:
    """Best of 5 pinned host -> device copies, bytes/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src, non_blocking=True)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    return nbytes / best


def capped(args) -> bool:
    """Weights+grads+AdamW states (fp32: 16 B/param) >= 4x the GPU cap; losses match."""
    steps, data = 20, batches(20, args.bs or 2, args.seq or 512)
    model = llama(args.layers, 2048, 5632)
    model.gradient_checkpointing_enable({"use_reentrant": False})  # composes with streaming
    nparam = sum(p.numel() for p in model.parameters())
    state_bytes = 16 * nparam
    cap = state_bytes / 4.4
    total = torch.cuda.get_device_properties(0).total_memory
    print(
        f"params: {nparam / 1e9:.3f} B; weights+grads+m+v: {state_bytes / GiB:.1f} GiB; "
        f"cap: {cap / GiB:.1f} GiB (fraction {cap / total:.4f})"
    )
    ref = llama(args.layers, 2048, 5632).cuda()
    ref.gradient_checkpointing_enable({"use_reentrant": False})
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    ref_losses = [step(ref, x, opt).item() for x in data[:steps]]
    del ref, opt
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.set_per_process_memory_fraction(cap / total)
    handle = apply_param_offload(model, args.fraction, device="cuda")
    opt = CPUAdamW(
        model.parameters(),
        lr=1e-4,
        weight_decay=0.01,
        param_offload=handle,
        fused_backward=args.fused,
    )
    print(format_placement(handle.placement_rows() + opt.placement_rows()))
    t0 = time.perf_counter()
    losses = [step(model, x, opt).item() for x in data[:steps]]
    dt = (time.perf_counter() - t0) / steps
    torch.cuda.set_per_process_memory_fraction(1.0)
    diff = max(abs(a - b) / abs(a) for a, b in zip(ref_losses, losses))
    print("ref losses:    ", " ".join(f"{v:.4f}" for v in ref_losses))
    print("offload losses:", " ".join(f"{v:.4f}" for v in losses))
    print(
        f"max relative loss difference: {diff:.2e}; peak allocated "
        f"{torch.cuda.max_memory_allocated() / GiB:.2f} GiB; {dt:.2f} s/step"
    )
    ok = diff < 1e-2 and torch.cuda.max_memory_allocated() <= cap
    print("capped:", "PASS" if ok else "FAIL")
    return ok


def _time_steps(model, data, n_warm: int = 3):
    for x in data[:n_warm]:
        step(model, x)
    for p in model.parameters():
        p.grad = None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for x in data[n_warm:]:
        step(model, x)
        for p in model.parameters():
            p.grad = None
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (len(data) - n_warm)


def overhead(args) -> bool:
    """Forward+backward time with param_offload=0.5 vs none, beside the transfer floor."""
    data = batches(13, args.bs or 8, args.seq or 2048)
    model = llama(args.layers, 2048, 5632).to(torch.bfloat16).cuda()
    base = _time_steps(model, data)
    handle = apply_param_offload(model, 0.5, keep_grads=True)
    loads0, h2d0 = handle.loads, handle.h2d_bytes
    off = _time_steps(model, data)
    per_step = (handle.h2d_bytes - h2d0) / (len(data))
    bw = pcie_h2d_bandwidth()
    floor = per_step / bw
    print(
        f"batch {data[0].shape[0]}x{data[0].shape[1]}; streamed layers {len(handle.plan.streamed_layers)}"
        f"/{len(handle.plan.streamed)}; loads/step {(handle.loads - loads0) / len(data):.1f}"
    )
    print(
        f"no offload: {base * 1e3:.1f} ms/step (compute); param_offload=0.5: {off * 1e3:.1f} "
        f"ms/step; ratio {off / base:.3f}"
    )
    print(
        f"transfer floor: {per_step / GiB:.2f} GiB/step / {bw / 1e9:.1f} GB/s PCIe H2D = "
        f"{floor * 1e3:.1f} ms"
    )
    ok = off <= 1.10 * base
    print("overhead:", "PASS" if ok else "FAIL")
    return ok


def reserved(args) -> bool:
    """memory_reserved after each of 100 steps, the arena vs per-load caching-allocator tensors."""
    ok = True
    for allocator in ("arena", "torch"):
        model = llama(8, 1024, 2816)
        handle = apply_param_offload(model, 0.5, device="cuda", allocator=allocator)
        opt = CPUAdamW(model.parameters(), lr=1e-4, param_offload=handle)
        seqs = [256, 512, 384, 128]  # varying shapes stress the caching allocator
        trace = []
        for s in range(100):
            x = torch.randint(0, 32000, (4, seqs[s % 4]))
            step(model, x, opt)
            torch.cuda.synchronize()
            trace.append(torch.cuda.memory_reserved())
        growth = max(trace[10:]) - min(trace[10:])
        print(
            f"{allocator:>5}: reserved step 1 {trace[0] / 2**20:.0f} MiB, step 10 "
            f"{trace[9] / 2**20:.0f} MiB, step 100 {trace[-1] / 2**20:.0f} MiB, "
            f"max-min over steps 11..100 {growth / 2**20:.1f} MiB"
        )
        if allocator == "arena":
            ok = growth == 0
        opt.close()
        handle.remove()
        del model, opt, handle
        gc.collect()
        torch.cuda.empty_cache()
    print("reserved:", "PASS" if ok else "FAIL")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["capped", "overhead", "reserved", "all"])
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--bs", type=int, default=None, help="capped: 2, overhead: 8")
    ap.add_argument("--seq", type=int, default=None, help="capped: 512, overhead: 2048")
    ap.add_argument("--fraction", type=float, default=0.9)
    ap.add_argument("--fused", action="store_true", help="CPUAdamW(fused_backward=True)")
    args = ap.parse_args()
    todo = ["capped", "overhead", "reserved"] if args.what == "all" else [args.what]
    results = {w: globals()[w](args) for w in todo}
    print("summary:", results)


if __name__ == "__main__":
    main()
