"""python toy_repro.py : the dpt level-0 "miss" without transformers. A backbone that, like
transformers' output capturing, takes a threading.Lock on its first forward only (dynamo: graph
break) -> the first compiled step has 2 graphs, every later compile 1. A plain torch.compile
step measured first (as benchmarks/zoo.py check_model does) and memopt's report compiled after
disagree; measured on the same dynamo partition they agree."""
import os, sys, threading, time
import torch
from torch import nn
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from memopt.measure import measure_saved
from torch._dynamo.utils import counters

LOCK = threading.Lock()


def maybe_install(module):  # transformers' maybe_install_capturing_hooks (output_capturing.py)
    if getattr(module, "installed", False):
        return
    with LOCK:  # dynamo: "Unsupported context manager": a graph break in the caller
        module.installed = True


class Backbone(nn.Module):
    def __init__(self, d=32, n=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()) for _ in range(n))
        self.norm = nn.LayerNorm(d)  # its output is returned but the loss never reads it

    def forward(self, x):
        maybe_install(self)
        hs = []
        for layer in self.layers:
            x = x + layer(x)
            hs.append(x)
        return self.norm(x), hs


class Model(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.backbone = Backbone(d)
        self.head = nn.Linear(d, d)

    def forward(self, x):
        last, hs = self.backbone(x)
        return self.head(hs[-2]).square().mean()


def step(model, fn, x):
    model.zero_grad(set_to_none=True)
    counters.clear()
    with compat.no_compile_caches():
        loss, saved = measure_saved(lambda: fn(x), [*model.parameters(), x])
        loss.backward()
    assert saved.eager == 0, saved.eager
    return saved.compiled, counters["stats"]["unique_graphs"]


def level0_prediction(model, x):
    torch._dynamo.reset()
    opt = memopt.optimize(model, level=1)
    step(model, opt, x)
    rep = memopt.report(opt)
    return rep.saved_bytes()[0], len(rep.regions)


t0 = time.time()
x = torch.randn(4, 64, 32)
torch.manual_seed(0); m = Model()
torch._dynamo.reset()
meas, g = step(m, torch.compile(m), x)  # first forward ever: the lock breaks the graph
pred, regions = level0_prediction(m, x)  # compiled after: the lock is skipped, one graph
print(f"as check_model: measured {meas} ({g} graphs, plain torch.compile, first step) vs "
      f"predicted {pred} ({regions} region, memopt compiled after): diff {meas - pred}")
torch._dynamo.reset()
meas1, g1 = step(m, torch.compile(m), x)
print(f"same partition: measured {meas1} ({g1} graph) vs predicted {pred}: exact {meas1 == pred}")
torch.manual_seed(0); m2 = Model()
pred2, regions2 = level0_prediction(m2, x)  # fresh model: memopt sees the 2 graphs
print(f"same partition: measured {meas} ({g} graphs) vs predicted {pred2} ({regions2} regions) "
      f"on a fresh model: exact {meas == pred2}")
print(f"{time.time() - t0:.0f}s")
