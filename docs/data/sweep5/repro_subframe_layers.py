"""offload_layers when dynamo compiles an inner module's frame (a graph break inside a submodule's
forward: LED's encoder/decoder, Llava's language model). The region's layer paths are relative to
the frame's module ('layers.0'), the model's layers absolute ('inner.layers.0'): memopt calls them
foreign and offloads nothing.

cd docs/data/sweep5 && PYTHONPATH=../../.. python repro_subframe_layers.py
"""
import logging
import sys

import torch
import torch.nn as nn

sys.path.insert(0, __import__("os").path.abspath(__import__("os").path.join(__import__("os").path.dirname(__file__), "../../..")))
import memopt
from memopt import _torch_compat as compat

torch.set_num_threads(1)
logging.basicConfig(level=logging.WARNING)


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.a, self.b = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.b(torch.nn.functional.gelu(self.a(x)))


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        print("eager code in the inner module")  # graph break inside the submodule's forward
        for blk in self.layers:
            x = blk(x)
        return x


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(64, 64)

    def forward(self, x):
        return self.head(self.inner(x)).pow(2).mean()


torch.manual_seed(0)
m, x = Outer(), torch.randn(8, 128, 64)
m(x).backward()
ref = {n: p.grad.clone() for n, p in m.named_parameters()}
m.zero_grad()
torch._dynamo.reset()
with compat.no_compile_caches():
    opt = memopt.optimize(m, offload_layers=1, offload_min_bytes=0)
    opt(x).backward()
rep = memopt.report(opt)
off = [r.extra.get("offload", {}) for r in rep.regions]
print("regions:", len(rep.regions), "offloaded bytes per region:",
      [o.get("total_bytes") if isinstance(o, dict) else None for o in off],
      "grads ok:", all(torch.allclose(p.grad, ref[n], atol=1e-6) for n, p in m.named_parameters()))
