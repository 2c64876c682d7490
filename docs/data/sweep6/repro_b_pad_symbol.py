"""memopt plan: a plan row of a `ConstantPadNd` on the model's input (EfficientNet's
`ZeroPad2d(padding=(0, 1, 0, 1))` on pixel_values) has a raw Dynamo symbol and no value:
EfficientNet at --batch 2 and 3 prints `ConstantPadNd+:1:-1  1  ?  50700*batch - 49152*s97`
(s97 should be `batch`: the saving is the padded copy minus the input it is recomputed from).

    python repro_b_pad_symbol.py      (from docs/data/sweep6, venv on)
"""
import os, re, subprocess, sys

import torch
import torch.nn as nn


class PadConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.pad = nn.ZeroPad2d(padding=(0, 1, 0, 1))
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.head = nn.Linear(8, 10)

    def forward(self, pixel_values, labels):  # (batch, 3, 32, 32), (batch,)
        h = self.conv(self.pad(pixel_values)).relu().mean((2, 3))
        return nn.functional.cross_entropy(self.head(h), labels)


def build(batch=None):
    b = batch or 2
    return PadConv(), {"pixel_values": torch.randn(b, 3, 32, 32), "labels": torch.randint(0, 10, (b,))}


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "repro_b_pad_symbol:build",
                        "--batch", "2", "--device-kind", "cpu"], cwd=here, env=env,
                       capture_output=True, text=True)
    print(p.stdout[-3000:], p.stderr[-2000:])
    odd = sorted(set(re.findall(r"\b(?:s\d+|inputs_\w+|L_\w+|u\d+)\b", p.stdout)))
    unknown = [l for l in p.stdout.splitlines() if re.search(r"\s\?\s", l)]
    print("raw symbols:", odd, "rows without a value:", unknown)
    assert p.returncode == 0, f"memopt plan failed (rc {p.returncode})"
    assert not odd and not unknown, "BUG: a plan row has a raw symbol / no value"
