"""``offload_layers`` counts the model's layers whatever frame dynamo compiled them in, and
however dynamo reached them. Found by a sweep of 18 architectures memopt had not seen
(seventy-third stop, 2026-12-07): on diffusers models (PixArt, CogVideoX, Sana, UNet3D: a
``__getattr__`` of their own, so dynamo names a layer ``L['self'].__dict__['_modules']
['blocks'][0]``) and where a graph break inside a submodule's ``forward`` makes that frame a
region of its own (LED's encoder and decoder, Llava's language model: paths from the frame's
module, ``layers.0`` for the model's ``inner.layers.0``), memopt called the region's layers
none of the model's and offloaded nothing."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import memopt
from memopt.passes.detect_layers import frame_prefix, normalize_module_path
from tests.test_cudagraphs_offload import _Block

D, ROWS = 32, 16
#: layer 0's offloaded bytes: its GELU's input and output, ROWS x 4D float32 each
LAYER0 = {"0": 2 * ROWS * 4 * D * 4}


class _Stack(nn.Module):
    def __init__(self, eager: bool):
        super().__init__()
        self.eager = eager
        self.layers = nn.ModuleList(_Block(D) for _ in range(3))

    def forward(self, x):
        if self.eager:
            torch._dynamo.graph_break()  # this frame becomes a region of its own
        for b in self.layers:
            x = b(x)
        return x


class _Outer(nn.Module):
    """An encoder and a decoder, each compiled from its own frame (LED, Llava)."""

    def __init__(self):
        super().__init__()
        self.enc, self.dec = _Stack(True), _Stack(True)
        self.head = nn.Linear(D, D)

    def forward(self, x):
        return self.head(self.dec(self.enc(x))).pow(2).mean()


class _Own(nn.Module):
    """A module with a ``__getattr__`` of its own, as diffusers' ``ModelMixin``."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(_Block(D) for _ in range(3))

    def __getattr__(self, name):
        return super().__getattr__(name)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.pow(2).mean()


def _train(model):
    torch.manual_seed(0)
    x = torch.randn(ROWS, D)
    ref = copy.deepcopy(model)
    ref(x).backward()
    opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
    opt(x).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    return memopt.report(opt).regions


def test_layers_reached_past_a_getattr_of_their_own_are_the_models():
    (region,) = _train(_Own())
    assert region.extra["layers"]["names"] == ["blocks.0", "blocks.1", "blocks.2"]
    assert region.extra["offload"]["bytes_per_layer"] == LAYER0
    assert not region.warnings


def test_regions_compiled_from_a_submodules_frame_name_and_offload_the_models_layers():
    regions = _train(_Outer())
    by_layers = {tuple(r.extra.get("layers", {}).get("names", ())): r for r in regions}
    enc = by_layers[("enc.layers.0", "enc.layers.1", "enc.layers.2")]
    dec = by_layers[("dec.layers.0", "dec.layers.1", "dec.layers.2")]
    # offload_layers=1 counts the model's layers: the encoder's first, none of the decoder's
    assert enc.extra["offload"]["bytes_per_layer"] == LAYER0
    assert dec.extra.get("offload") is None
    assert not any("none of the model's layers" in w for r in regions for w in r.warnings)


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("L['self'].__dict__['_modules']['blocks'][0]", "blocks.0"),
        ("L['self']._modules['layers']._modules['0']", "layers.0"),
        ("L['args'][0].model.layers[3]", "model.layers.3"),
        ("L['self']._orig_mod.h._modules['2']", "h.2"),
    ],
)
def test_module_paths_drop_what_dynamo_and_wrappers_add(path, want):
    assert normalize_module_path(path) == want


def test_the_frame_prefix_is_what_the_weights_names_add_to_their_paths_in_the_frame():
    w, b, other = torch.zeros(1), torch.zeros(1), torch.zeros(1)
    names = {id(w): "model.enc.layers.0.a.weight", id(b): "model.enc.layers.0.a.bias"}
    src = "L['self']._modules['layers']._modules['0']._modules['a']._parameters['{}']"
    inputs = [w, b, other, torch.zeros(1)]
    sources = [src.format("weight"), src.format("bias"), None, "L['x']"]
    assert frame_prefix(sources, inputs, names) == "model.enc"
    own = [s.replace("L['self']", "L['self'].model.enc") for s in sources[:2]]
    assert frame_prefix(own, inputs[:2], names) == ""  # the model's own forward
    assert frame_prefix([None, "L['x']"], [other, w], {}) == ""  # no weight read
