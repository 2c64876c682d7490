"""memopt plan: an input whose leading dimension is a multiple of the batch (MusicGen's
`input_ids` is (batch * num_codebooks, seq), reshaped to (batch, num_codebooks, seq) inside the
model) is traced with static shapes: every formula is a number at the traced batch, so the
--batch 2 formulas evaluated at batch 3 are not the --batch 3 numbers. No graph break here.

    python repro_plan_kbatch_input.py      (from docs/data/sweep8, venv on)
"""
import os, re, subprocess, sys

import sympy
import torch
import torch.nn as nn


class Codebooks(nn.Module):
    def __init__(self, k=2):
        super().__init__()
        self.k = k
        self.emb = nn.ModuleList(nn.Embedding(64, 32) for _ in range(k))
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 32)

    def forward(self, input_ids):  # (batch * k, 16)
        ids = input_ids.reshape(-1, self.k, input_ids.shape[-1])  # (batch, k, 16)
        h = sum(self.emb[i](ids[:, i]) for i in range(self.k))  # (batch, 16, 32)
        return self.b(self.a(h).relu()).relu().sum()


def build(batch=None):
    b = batch or 2
    return Codebooks(), {"input_ids": torch.randint(0, 64, (b * 2, 16))}


def plan(b):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "repro_plan_kbatch_input:build",
                        "--batch", str(b), "--device-kind", "cpu"], cwd=here, env=env,
                       capture_output=True, text=True)
    # the plans' symbolic savings (cluster id -> formula) and Note 2's symbol values
    rows = dict(re.findall(r"^- Plan \d+ : \S+ : (\S+)\s+\d+\s+[\d,]+\s+(.+?)\s*$", p.stdout, re.M))
    assert rows, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout, rows


if __name__ == "__main__":
    out2, r2 = plan(2)
    out3, r3 = plan(3)
    print(out2[-2500:])
    bad = []
    for cid, f2 in r2.items():
        at3 = int(sympy.sympify(f2).subs(sympy.Symbol("batch"), 3))
        want = int(sympy.sympify(r3[cid]).subs(sympy.Symbol("batch"), 3))
        print(f"{cid}: --batch 2 saving {f2} -> {at3} at batch 3; --batch 3 says {r3[cid]} = {want}")
        if at3 != want:
            bad.append(cid)
    notes = [l for l in out2.splitlines() if "traced batch only" in l or "static shapes" in l]
    print("--batch 2 notes:", notes)
    assert not bad, f"BUG: the --batch 2 savings of {bad} do not scale to batch 3 (no graph break)"
