"""memopt plan: a Python int read from the batch (`batch_size = pixel_values.shape[0]`) that
crosses a graph break (DETR: the encoder layer's training-time
`if not torch.isfinite(h).all(): h = clamp(h)`, then
`query_position_embeddings.weight.unsqueeze(0).repeat(batch_size, 1, 1)` in the resumed
frame) is a constant in the next region, so what is built from it is frozen at the traced
batch: the --batch 2 formula evaluated at batch 3 is not the --batch 3 number.

    python repro_plan_break_static.py      (from docs/data/sweep7, venv on)
"""
import os, re, subprocess, sys

import sympy
import torch
import torch.nn as nn


class Break(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 32)
        self.queries = nn.Embedding(8, 32)
        self.norm = nn.LayerNorm(32)

    def forward(self, x):  # x: (batch, 16, 32)
        batch_size = x.shape[0]  # a Python int in the frame (DETR's DetrModel.forward)
        h = self.a(x).relu()
        if not torch.isfinite(h).all():  # data-dependent branch: a graph break
            h = h.clamp(-1e4, 1e4)
        q = self.queries.weight.unsqueeze(0).repeat(batch_size, 1, 1)  # (batch, 8, 32)
        return self.norm(self.b(h).relu()).sum() + self.norm(self.c(q).relu()).sum()


def build(batch=None):
    return Break(), {"x": torch.randn(batch or 2, 16, 32)}


def plan(b):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "repro_plan_break_static:build",
                        "--batch", str(b), "--device-kind", "cpu"], cwd=here, env=env,
                       capture_output=True, text=True)
    m = re.search(r"^\s+activations\s+[\d.]+ \S+\s+= (.*?)\s{2,}\(", p.stdout, re.M)
    assert m, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout, m.group(1)


if __name__ == "__main__":
    out2, f2 = plan(2)
    out3, f3 = plan(3)
    print(out2[-1800:])
    at3 = int(sympy.sympify(f2).subs(sympy.Symbol("batch"), 3))
    want = int(sympy.sympify(f3).subs(sympy.Symbol("batch"), 3))
    print(f"--batch 2 activations: {f2}  -> at batch 3: {at3}")
    print(f"--batch 3 activations: {f3}  -> {want}")
    assert at3 == want, "BUG: the --batch 2 formula does not scale to batch 3"
