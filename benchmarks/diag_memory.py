"""Where is the peak? Forward peak, memory held after forward, backward peak, per variant."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import gib, hf_model  # noqa: E402

import memopt  # noqa: E402


def probe(model, compiled, ids):
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = compiled(input_ids=ids, labels=ids)
        torch.cuda.synchronize()
        fwd_peak = torch.cuda.max_memory_allocated()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out.loss.backward()
        torch.cuda.synchronize()
        bwd_peak = torch.cuda.max_memory_allocated()
        del out
    return base, fwd_peak, held, bwd_peak


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    cfg = {"gpt2": ("gpt2", 12, 768, 8, 1024), "llama": ("llama", 8, 2048, 4, 2048)}[kind]
    model = hf_model(*cfg[:3])
    ids = torch.randint(0, 32000, cfg[3:], device="cuda")
    print("variant | base | fwd_peak | held_after_fwd | bwd_peak (GiB)")
    for name in ("compile", "budget0.5", "level1", "biasgelu"):
        torch._dynamo.reset()
        if name == "compile":
            c = torch.compile(model)
        elif name == "budget0.5":
            torch._functorch.config.activation_memory_budget = 0.5
            c = torch.compile(model)
        elif name == "level1":
            torch._functorch.config.activation_memory_budget = 1.0
            c = memopt.optimize(model, level=1)
        else:
            c = memopt.optimize(model, config="BiasGelu+:1:-1")
        r = probe(model, c, ids)
        print(name, " | ".join(gib(x) for x in r), flush=True)


if __name__ == "__main__":
    main()
