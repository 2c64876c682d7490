"""memopt plan, a step of several compiled regions (a graph break): the peak's "gradients" row
counts each later region's gradient with respect to its (activation) inputs as a gradient
live to the optimizer step, so it grows with the batch and exceeds "all gradients" (the
parameters' gradients) that the same row's note names; and the "inputs" row ("token ids and
labels") adds every region's non-parameter inputs, i.e. the activations handed across the
break, to the user's inputs. Seen on WavLM (4 regions): `gradients = 92416*batch + 118400`
(386 KiB at batch 3, "all gradients 370.03 KiB") and `inputs = 133888*batch` where the user's
inputs are 16160*batch.

    python repro_b_region_rows.py      (from docs/data/sweep6, venv on)
"""
import json, os, subprocess, sys

import torch
import torch.nn as nn


class TwoRegions(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):  # x: (batch, 256, 16)
        h = self.a(x).relu()
        torch._dynamo.graph_break()  # a data-dependent branch, transformers' output capturing, CTC...
        return self.b(h).sigmoid().sum()


def build(batch=None):
    return TwoRegions(), {"x": torch.randn(batch or 2, 256, 16)}


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    batch = 3
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "repro_b_region_rows:build",
                        "--batch", str(batch), "--device-kind", "cpu", "--json"], cwd=here,
                       env=env, capture_output=True, text=True)
    print(p.stderr[-2000:])
    start = p.stdout.find("{")
    rep = json.loads(p.stdout[start:])

    def find(o):  # the peak dict, wherever the JSON nests it
        if isinstance(o, dict):
            if "components" in o and "all_gradients_bytes" in o:
                return o
            for v in o.values():
                r = find(v)
                if r:
                    return r
        if isinstance(o, list):
            for v in o:
                r = find(v)
                if r:
                    return r

    peak = find(rep)
    c = peak["components"]
    for k, v in c.items():
        print(f"{k:18s} {v['bytes']:>10,}  = {v['symbolic']}")
    params = sum(q.numel() * 4 for q in TwoRegions().parameters())
    user_inputs = batch * 256 * 16 * 4
    print(f"parameter gradients: {params:,} B (all_gradients_bytes {peak['all_gradients_bytes']:,}); "
          f"user inputs: {user_inputs:,} B")
    errs = []
    if c["gradients"]["bytes"] > peak["all_gradients_bytes"]:
        errs.append(f"gradients row {c['gradients']['bytes']:,} B ({c['gradients']['symbolic']}) "
                    f"exceeds all parameter gradients {peak['all_gradients_bytes']:,} B")
    if c["inputs"]["bytes"] != user_inputs:
        errs.append(f"inputs row {c['inputs']['bytes']:,} B ({c['inputs']['symbolic']}) is not the "
                    f"user's inputs {user_inputs:,} B")
    assert not errs, "BUG: " + "; ".join(errs)
