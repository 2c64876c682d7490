"""Does ``memopt plan`` see Inductor's padded matmuls? (debug: prints the LM-head matmuls)

python benchmarks/diag_pad.py            # on the GPU host (fake CUDA tensors)
python benchmarks/diag_pad.py --emulate  # as on a laptop
"""

from __future__ import annotations

import argparse

import torch

import memopt.cli.trace as trace_mod
from memopt.cli import models
from memopt.cli.analyze import Request, analyze
from memopt.cli.liveness import padded_operands
from memopt.config import resolve_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--emulate", action="store_true")
    args = ap.parse_args()
    original = trace_mod.step_profile

    def patched(fw, bw, nfo, symbols, static=(), device=None, pad_matmuls=False):
        print(f"step_profile device={device} pad_matmuls={pad_matmuls}")
        for name, g in (("fw", fw), ("bw", bw)):
            for n in g.graph.nodes:
                v = n.meta.get("val")
                if not isinstance(v, torch.Tensor) or v.numel() < 10_000_000:
                    continue
                ins = [
                    (a.name, tuple(a.meta["val"].shape))
                    for a in n.all_input_nodes
                    if isinstance(a.meta.get("val"), torch.Tensor)
                ]
                print(f"  {name} {n.name} {n.target} {tuple(v.shape)} {v.dtype} <- {ins}")
                if "mm" in str(n.target):
                    print(f"     padded_operands: {padded_operands(n)}")
        return original(fw, bw, nfo, symbols, static, device, pad_matmuls)

    trace_mod.step_profile = patched
    source = models.resolve("hf:gpt2", {"n_embd": 1024, "n_layer": 2, "n_head": 16})
    request = Request(
        emulate_cuda=args.emulate or None,
        batch=8,
        seq=1024,
        dtype=torch.bfloat16,
        device_kind="cuda",
        depth="full",
        optimizer="adamw",
        state_dtype="param",
    )
    a = analyze(source, request, [resolve_config(level=0)])
    print(a.peaks[0].at(a.values).table())


if __name__ == "__main__":
    main()
