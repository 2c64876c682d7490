"""Core recompute plans on a GPU: plain torch.compile vs memopt (BiasGelu+ plan, level 1).

Reports, per model: peak memory (torch.cuda.max_memory_allocated), median step time, the
measured activation bytes saved for backward and the report's estimate of the saving.

    python benchmarks/core_recompute.py --out results.md
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import gib, hf_model, step_stats  # noqa: E402

import memopt  # noqa: E402
from memopt.measure import measure_saved_activation_bytes  # noqa: E402


def run(kind, layers, hidden, batch, seq):
    model = hf_model(kind, layers, hidden)
    ids = torch.randint(0, 32000, (batch, seq), device="cuda")
    params = list(model.parameters())
    rows = []
    variants = [
        ("torch.compile", None),
        ("memopt BiasGelu+:1:-1", {"config": "BiasGelu+:1:-1"}),
        ("memopt level=1", {"level": 1}),
    ]
    if kind == "llama":
        variants = [variants[0], variants[2]]
    base_ms = base_peak = base_saved = None
    for name, kw in variants:
        torch._dynamo.reset()
        compiled = torch.compile(model) if kw is None else memopt.optimize(model, **kw)

        def step(compiled=compiled):
            model.zero_grad(set_to_none=True)
            compiled(input_ids=ids, labels=ids).loss.backward()

        ms, peak = step_stats(step)
        out, saved = measure_saved_activation_bytes(
            lambda compiled=compiled: compiled(input_ids=ids, labels=ids), exclude=[*params, ids]
        )
        out.loss.backward()
        est = None
        if kw is not None:
            b, a = memopt.report(compiled).saved_bytes()
            est = b - a
        if base_ms is None:
            base_ms, base_peak, base_saved = ms, peak, saved
        rows.append((kind, name, ms, peak, saved, est, base_ms, base_peak, base_saved))
        if kw is not None:
            print(memopt.report(compiled).table())
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    args = p.parse_args()
    lines = [
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16",
        "",
        "| model | variant | step ms | vs compile | peak GiB | peak drop GiB | saved-for-bw GiB "
        "| measured saving GiB | table estimate GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    configs = [("gpt2", 12, 768, 8, 1024), ("llama", 8, 2048, 4, 2048)]
    for cfg in configs:
        for kind, name, ms, peak, saved, est, bms, bpeak, bsaved in run(*cfg):
            lines.append(
                f"| {kind} {cfg[1]}L h{cfg[2]} b{cfg[3]}x{cfg[4]} | {name} | {ms:.1f} | "
                f"{ms / bms:.3f}x | {gib(peak)} | {gib(bpeak - peak)} | {gib(saved)} | "
                f"{gib(bsaved - saved)} | {'-' if est is None else gib(est)} |"
            )
        print("\n".join(lines), flush=True)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
