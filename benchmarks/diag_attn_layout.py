"""Attention recompute in graphs Inductor lays out channels-last, on the device (issue 16, sweep 4).

On the CPU, a recomputed attention kernel in a graph with convolutions gave nan: torch wraps it
in an RNG-state fallback without SDPA's stride constraint, and Inductor's layout optimization
handed it channels-last q, k and v. memopt now keeps attention in such graphs
(``passes/find_recompute_subgraphs.py`` ``ATTENTION_CHANNELS_LAST``). This script asks, on CUDA:

- does Inductor lay the graph out channels-last (``compat.inductor_layout_opt``, per region)?
- with memopt's guard off (``--variants ...,unguarded``: ``memopt.facts.layout_copies`` reports
  no channels-last layout, so attention may be recomputed), are loss and gradients still
  torch.compile's?
- what does keeping attention cost: peak and step time of the guarded plan against the unguarded.

Models: ``t2d``, diffusers' Transformer2DModel (a 1x1 conv in, self- and cross-attention, a
1x1 conv out), fp32, with the plan ``Attention+:1:1``; ``unet``, a UNet2DConditionModel
(Stable Diffusion 1.5's block widths, one layer per block), bf16 (``--dtype float32`` to
compare gradients without bf16's rounding), with ``level=1``. Reference gradients are held on
the host. One JSON line per variant::

    python benchmarks/diag_attn_layout.py --model t2d --json $OUT/attn_t2d.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)


def build(name: str, device: str, batch: int, dtype_name: str | None = None):
    import diffusers
    import torch

    g = torch.Generator().manual_seed(0)
    if name == "t2d":
        net = diffusers.Transformer2DModel(
            num_attention_heads=8, attention_head_dim=40, in_channels=320, norm_num_groups=32,
            cross_attention_dim=768, num_layers=1,
        )  # fmt: skip
        inputs = {
            "hidden_states": torch.randn(batch, 320, 32, 32, generator=g),
            "encoder_hidden_states": torch.randn(batch, 77, 768, generator=g),
        }
        dtype, kwargs = torch.float32, {"config": "Attention+:1:1"}
    elif name == "unet":
        net = diffusers.UNet2DConditionModel(
            sample_size=64, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=768,
            attention_head_dim=8,
        )  # fmt: skip
        inputs = {
            "sample": torch.randn(batch, 4, 64, 64, generator=g),
            "timestep": torch.tensor(10),
            "encoder_hidden_states": torch.randn(batch, 77, 768, generator=g),
        }
        dtype, kwargs = torch.bfloat16, {"level": 1}
    else:
        raise SystemExit(f"unknown model {name!r} (t2d, unet)")
    if dtype_name:
        dtype = getattr(torch, dtype_name)
    net = net.to(device, dtype).train()
    inputs = {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in inputs.items()
    }
    return net, inputs, dtype, kwargs


def run(net, fn, inputs, iters: int, device: str):
    import torch

    def step():
        net.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        loss = fn(**inputs).sample.float().pow(2).mean()
        loss.backward()
        return loss

    loss = step()  # compiles
    grads = {  # on the host: the next variant's device peak must not hold them
        n: p.grad.detach().float().cpu() for n, p in net.named_parameters() if p.grad is not None
    }
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    out = {"loss": loss.item(), "ms": 1e3 * statistics.median(times) if times else None}
    if device == "cuda":
        out["peak_allocated"] = torch.cuda.max_memory_allocated()
        out["peak_over_start"] = out["peak_allocated"] - base
    return out, grads


def main(argv=None) -> None:
    import torch

    import memopt
    import memopt.facts as facts
    from memopt import _torch_compat as compat

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="t2d")
    ap.add_argument("--variants", default="compile,guarded,unguarded")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default=None)
    ap.add_argument("--dtype", default=None, help="float32, bfloat16 (default: the model's)")
    args = ap.parse_args(argv)
    net, inputs, dtype, kwargs = build(args.model, args.device, args.batch, args.dtype)
    real = facts.layout_copies
    rows, ref = [], None
    with compat.no_compile_caches():
        for variant in args.variants.split(","):
            torch._dynamo.reset()
            layouts = []

            def spy(fw, n, _unguarded=variant == "unguarded", layouts=layouts):
                got = real(fw, n)
                layouts.append(got.channels_last)
                return dataclasses.replace(got, channels_last=False) if _unguarded else got

            facts.layout_copies = spy
            fn = None
            try:
                if variant == "eager":  # the noise floor: eager against torch.compile
                    fn = net
                elif variant == "compile":
                    fn = torch.compile(net)
                else:
                    fn = memopt.optimize(net, **kwargs)
                row, grads = run(net, fn, inputs, args.iters, args.device)
            except Exception as e:  # a failing variant is a result too
                row, grads = {"error": f"{type(e).__name__}: {str(e)[:400]}"}, None
            finally:
                facts.layout_copies = real
            row.update(model=args.model, variant=variant, channels_last=layouts)
            if variant not in ("compile", "eager") and "error" not in row:
                rep = memopt.report(fn)
                row["attention_recomputed"] = sum(
                    c["enabled"] for r in rep.regions for c in r.clusters
                    if c["cluster_id"].startswith("Attention")
                )  # fmt: skip
                row["attention_kept_reason"] = sum(
                    "channels-last" in e["reason"] for r in rep.regions for e in r.excluded
                )  # fmt: skip
                row["final_saved_bytes"] = sum(r.final_saved_bytes or 0 for r in rep.regions)
                row["baseline_saved_bytes"] = sum(r.baseline_saved_bytes or 0 for r in rep.regions)
            if grads is not None and ref is not None:
                worst = max(
                    ((grads[k] - g).abs().max() / g.abs().max().clamp_min(1e-12)).item()
                    for k, g in ref.items()
                )  # fmt: skip
                row["grad_max_rel_err"] = worst
                row["nonfinite"] = any(not torch.isfinite(g).all() for g in grads.values())
            if variant == "compile":
                ref = grads
            row.update(torch=torch.__version__, device=torch.cuda.get_device_name()
                       if args.device == "cuda" else "cpu")  # fmt: skip
            print(json.dumps(row), flush=True)
            rows.append(row)
            del fn
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
