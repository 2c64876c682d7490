"""offload_layers on a module with its own __getattr__ (as diffusers' ModelMixin has): dynamo names
the layers L['self'].__dict__['_modules']['blocks'][i]; memopt normalizes that to
'__dict__.blocks.i', which is none of the model's layers ('blocks.i'), so nothing is offloaded
(warning: "this region's repeated modules (__dict__.blocks.0 .. ) are none of the model's layers").

cd docs/data/sweep5 && PYTHONPATH=../../.. python repro_dict_layers.py [plain]
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


class Net(nn.Module):
    def __init__(self, custom_getattr=True):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x.pow(2).mean()


class NetGetattr(Net):
    def __getattr__(self, name):  # diffusers.ModelMixin overrides __getattr__ too
        return super().__getattr__(name)


for cls in (Net, NetGetattr):
    torch.manual_seed(0)
    m, x = cls(), torch.randn(8, 128, 64)
    m(x).backward()
    ref = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    torch._dynamo.reset()
    with compat.no_compile_caches():
        opt = memopt.optimize(m, offload_layers=1, offload_min_bytes=0)
        opt(x).backward()
    rep = memopt.report(opt)
    off = [r.extra.get("offload", {}) for r in rep.regions]
    print(cls.__name__, "offloaded bytes per region:",
          [o.get("total_bytes") if isinstance(o, dict) else None for o in off],
          "grads ok:", all(torch.allclose(p.grad, ref[n], atol=1e-6) for n, p in m.named_parameters()))
