"""``offload_layers`` counts the model's layers (``memopt.optimize`` finds them). A region whose
repeated modules are none of them (a head's projections after a graph break) offloads nothing
and says why. In sweep 4 Segformer's second region took its decode head's
``linear_projections`` for layers and offloaded ``linear_projections.0`` beside the encoder's
stage 0 (docs/data/sweep4/REPORT.md, finding 3)."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

import memopt
from tests.test_cudagraphs_offload import _Block


class _Head(nn.Module):
    def __init__(self, d: int = 32):
        super().__init__()
        self.p = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.p(x))


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(_Block() for _ in range(3))
        self.heads = nn.ModuleList(_Head() for _ in range(2))

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        torch._dynamo.graph_break()
        return sum(h(x).pow(2).mean() for h in self.heads)


def test_a_region_of_other_repeated_modules_offloads_nothing_and_says_why():
    torch.manual_seed(0)
    model, x = _Net(), torch.randn(16, 32)
    ref = copy.deepcopy(model)
    ref(x).backward()
    opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
    opt(x).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    first, head = memopt.report(opt).regions
    assert first.extra["layers"]["names"] == ["layers.0", "layers.1", "layers.2"]
    # layer 0: two 16 x 128 fp32 saved tensors (the GELU's input and output)
    assert first.extra["offload"]["bytes_per_layer"] == {"0": 2 * 16 * 128 * 4}
    assert head.extra["layers"]["names"] == ["heads.0", "heads.1"]
    assert head.extra.get("offload") is None
    assert head.warnings == [
        "activation offload: this region's repeated modules (heads.0 .. heads.1 (2)) are none "
        "of the model's layers that offload_layers / sync count (layers.0 .. layers.2 (3)); "
        "nothing is offloaded here"
    ]
