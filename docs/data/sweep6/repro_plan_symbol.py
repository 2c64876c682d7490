"""memopt plan: a later region's input whose leading dimension is batch*tokens (flattened)
gets a raw Dynamo symbol (`s...`/`inputs_..._dim0`) instead of a formula in `batch`, so the
plan's formulas do not scale with --batch. Qwen3-MoE's and OLMoE's router logits (the
load-balancing loss runs after a graph break) show it as
`16*inputs____stack0_router_logits_0_dim0`.

    python repro_plan_symbol.py      (from docs/data/sweep6, venv on)
"""
import os, re, subprocess, sys

import torch
import torch.nn as nn


class Flattened(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):  # x: (batch, 16, 8)
        h = self.a(x).relu().reshape(-1, 8)  # (batch*16, 8): flattened tokens
        logits = self.b(h)
        torch._dynamo.graph_break()  # like transformers' output capturing
        return (logits.softmax(-1) * logits.sigmoid()).sum()


def build(batch=None):
    return Flattened(), {"x": torch.randn(batch or 2, 16, 8)}


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "repro_plan_symbol:build",
                        "--batch", "2", "--device-kind", "cpu"], cwd=here, env=env,
                       capture_output=True, text=True)
    print(p.stdout[-3000:], p.stderr[-2000:])
    odd = sorted(set(re.findall(r"\b(?:s\d+|inputs_\w+|L_\w+)\b", p.stdout)))
    print("symbols other than batch/seq in the formulas:", odd)
    assert not odd, "BUG: a symbol that is batch*16 was not expressed in batch"
