"""``offload_layers`` on a model whose layer lists sit inside blocks of different types
(MobileViT: a MobileNet block, then MobileViT blocks each with a ``transformer.layer`` list).
``memopt.optimize`` counts the lists' layers; the graph's repeated modules are the outer blocks,
none of them a layer. The region now takes the model's layers inside it as its own, so
``offload_layers=k`` offloads the first k of them (sweep 4, finding 4: it offloaded nothing and
blamed a graph break)."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.helpers import compare
from tests.test_cudagraphs_offload import _Block as _Layer
from tests.test_offload_foreign_layers import _Head as _Stem


class _Stage(nn.Module):
    def __init__(self, n: int, d: int = 32):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.layer = nn.ModuleList(_Layer(d) for _ in range(n))

    def forward(self, x):
        x = self.proj(x)
        for layer in self.layer:
            x = layer(x)
        return x


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Stem(), _Stage(2), _Stage(3)])  # of two types

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.pow(2).mean()


def test_offload_layers_counts_the_layers_inside_blocks_of_different_types():
    torch.manual_seed(0)
    # torch.compile's loss and gradients (tests/helpers.py: compare asserts them)
    rep, _, _, _ = compare(
        _Net(), {"x": torch.randn(16, 32)}, lambda loss: loss, offload_layers=3, offload_min_bytes=0
    )
    (region,) = rep.regions
    assert region.extra["layers"]["names"] == [
        "blocks.1.layer.0",
        "blocks.1.layer.1",
        "blocks.2.layer.0",
        "blocks.2.layer.1",
        "blocks.2.layer.2",
    ]
    # the first three layers: each its up projection's 16 x 32 input and its GELU's 16 x 128
    # input and output (fp32); the last layer of the first stage also its output, which the
    # next stage's projection saves
    gelu, x_in = 2 * 16 * 128 * 4, 16 * 32 * 4
    want = {"0": x_in + gelu, "1": 2 * x_in + gelu, "2": x_in + gelu}
    assert region.extra["offload"]["bytes_per_layer"] == want
    assert not region.warnings
