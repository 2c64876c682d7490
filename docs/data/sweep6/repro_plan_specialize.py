"""memopt plan specializes the batch to the traced size when memopt's own memory model compares
a batch-sized tensor's numel with a static one that is equal at that size
(memopt/memory_rules.py `_same_index`: `v.numel() != numel` on SymInts adds the guard
`Eq(2*s0, 4)` and the shape env refines s0 to the singleton 2). Every formula made after that
is a constant, so `--batch 2` prints formulas that do not scale; `--batch 4` is fine.
ALBERT (`115712*batch + 728068` for `479488*batch + 516`), LeViT and Latte show it.

Model: h = Linear(8, 8)(x) for x of (batch, 8), then Linear(8, 2)(h) and gelu(h): the
backward's weight gradient of the second Linear (16 elements) reads h (8*batch elements), and
gelu(h) is a pointwise recompute candidate whose boundary is h.

    python repro_plan_specialize.py      (from docs/data/sweep6, venv on; ~30 s)
"""
import os, re, subprocess, sys

import torch
import torch.nn as nn


class Gram(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(8, 8)
        self.lin2 = nn.Linear(8, 2)

    def forward(self, x):  # x: (batch, 8)
        h = self.lin1(x)  # (batch, 8): read in the backward by lin2's weight gradient, whose
        # 16 elements equal h's 8*batch at batch 2
        return self.lin2(h).sum() + nn.functional.gelu(h).pow(2).sum()


def build(batch=None):
    return Gram(), {"x": torch.randn(batch or 2, 8)}


def plan(batch):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TORCH_LOGS="dynamic")
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "repro_plan_specialize:build",
                        "--batch", str(batch), "--device-kind", "cpu", "--debug"], cwd=here,
                       env=env, capture_output=True, text=True)
    acts = re.search(r"^\s+activations\s+.*?= (.*?)\s{2,}", p.stdout, re.M)
    inputs = re.search(r"^\s+inputs\s+.*?= (.*?)\s{2,}", p.stdout, re.M)
    guards = [l[l.find("eval "):][:160] for l in p.stderr.splitlines()
              if "memory_rules" in l or "range_refined_to_singleton" in l]
    return (acts and acts.group(1)), (inputs and inputs.group(1)), guards, p


if __name__ == "__main__":
    for b in (2, 4):
        a, i, g, p = plan(b)
        print(f"--batch {b}: activations = {a}; inputs = {i}")
        for line in g:
            print("    ", line)
        if a is None:
            print(p.stdout[-2000:], p.stderr[-2000:])
    a2, i2, _, _ = plan(2)
    assert "batch" in (i2 or ""), "BUG: at --batch 2 the batch was specialized (inputs constant)"
