"""offload_layers / sync count a list of small prediction heads as the model's layers when it
has more entries than the real layer stacks (SAM: `mask_decoder.output_hypernetworks_mlps`, 4
`SamFeedForward` heads, over `vision_encoder.layers` (2) and `mask_decoder.transformer.layers`
(2)); `offload_layers=1` then offloads 640 B of SAM's 1.2 MB region (sweep 8, logs/cmd_6.txt).
The heads have submodules, so sweep 7's fix (containers of bare modules are heads) does not
apply.

    python repro_layers_head_list.py      (from docs/data/sweep8, venv on; ~20 s)
"""
import torch
import torch.nn as nn

import memopt
from memopt.api import model_layers


class Block(nn.Module):  # a transformer-ish layer: large activations
    def __init__(self, d=64):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(self.fc1(self.norm(x)).relu())


class Head(nn.Module):  # SamFeedForward: proj_in, a list of hidden layers, proj_out
    def __init__(self, d=64, out=8):
        super().__init__()
        self.proj_in = nn.Linear(d, 16)
        self.layers = nn.ModuleList([nn.Linear(16, 16)])
        self.proj_out = nn.Linear(16, out)

    def forward(self, x):
        x = self.proj_in(x).relu()
        for l in self.layers:
            x = l(x).relu()
        return self.proj_out(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(Block() for _ in range(2))
        self.heads = nn.ModuleList(Head() for _ in range(4))  # one per output mask

    def forward(self, x):  # x: (batch, 256, 64)
        for b in self.encoder.layers:
            x = b(x)
        tok = x[:, 0]  # the heads read one token each (SAM: the mask tokens)
        return sum(h(tok).sum() for h in self.heads)


if __name__ == "__main__":
    torch.manual_seed(0)
    m = Model()
    got = [n for n, mod in m.named_modules() if any(mod is x for x in model_layers(m))]
    print("memopt's layers:", got)
    x = torch.randn(2, 256, 64)
    o = memopt.optimize(m, offload_layers=1, offload_min_bytes=0)
    for _ in range(2):
        m.zero_grad(set_to_none=True)
        o(x).backward()
    rep = memopt.report(o)
    off = rep.regions[0].extra.get("offload") or {}
    print("layers in the region:", rep.regions[0].extra.get("layers"))
    print("offloaded:", off.get("total_bytes"), "B of", rep.regions[0].baseline_saved_bytes, "B saved")
    assert got == ["encoder.layers.0", "encoder.layers.1"], (
        f"BUG: offload_layers counts {got} (the heads) as the model's layers")
