"""``offload_layers`` where graph breaks split some of the model's layers across regions while
another region holds repeated layers (DETR: each encoder layer cut by its training-time
``isfinite`` check, the decoder's layers in one graph: sweep 7). The step does not offload
across regions there, and the layer it selects is in no region that offloads: memopt says so
instead of offloading nothing in silence."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import memopt
from memopt.offload.step_offload import holds_layers, split_layers_note


class Block(nn.Module):
    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.fc1, self.fc2, self.cut = nn.Linear(16, 32), nn.Linear(32, 16), cut

    def forward(self, h):
        h = h + self.fc2(self.fc1(h).relu())
        if self.cut:
            torch._dynamo.graph_break()  # DETR's `if not torch.isfinite(h).all()`
        return h


class Stack(nn.Module):
    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(cut) for _ in range(2))

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return x


class EncDec(nn.Module):
    """DETR's layout: an encoder and a decoder module, each a stack of layers; only the
    encoder's layers break the graph, so the decoder's two layers compile as one region."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder, self.decoder = Stack(True), Stack(False)

    def forward(self, x):
        return self.decoder(self.encoder(x)).square().mean()


def test_a_layer_split_by_graph_breaks_beside_a_region_of_layers_is_said():
    model = EncDec()
    opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
    for _ in range(2):
        model.zero_grad()
        opt(torch.randn(4, 8, 16)).backward()
    step = memopt.report(opt).step
    assert step is not None and step.offload_runs == () and step.offloaded_bytes == 0
    notes = [n for n in step.notes if n.startswith("offload_layers=1: nothing is offloaded")]
    assert len(notes) == 1, step.notes
    assert "(decoder.layers.0 .. decoder.layers.1)" in notes[0], notes[0]


def _region(layers=None, foreign=None, offloaded=0):
    extra = {}
    if layers is not None:
        extra["layers"] = {"names": layers} | ({} if foreign is None else {"foreign": foreign})
    if offloaded:
        extra["offload"] = {"total_bytes": offloaded}
    return SimpleNamespace(extra=extra)


def test_foreign_repeats_hold_no_layers_and_a_region_that_offloads_needs_no_note():
    assert holds_layers(_region(["decoder.0", "decoder.1"]))  # reports cached before the flag
    assert not holds_layers(_region(["ff.net.0", "ff.net.2"], foreign=True))  # Mochi's block
    assert not holds_layers(_region())
    config = SimpleNamespace(offload_k=1, sync=None)
    regions = [_region(), _region(["decoder.0", "decoder.1"], foreign=False)]
    state = SimpleNamespace(config=config, regions=regions)
    assert split_layers_note(state, (0, 0, 1)).startswith("offload_layers=1: nothing is")
    regions[1] = _region(["decoder.0", "decoder.1"], foreign=False, offloaded=4096)
    assert split_layers_note(state, (0, 0, 1)) is None
    state.config = SimpleNamespace(offload_k=0, sync=None)
    assert split_layers_note(state, (0, 0, 1)) is None


def test_a_head_list_of_bare_linears_is_no_stack_of_layers():
    """DETR's box predictor keeps three ``nn.Linear`` in ``layers``: they were counted as 3 more
    model layers (7 for a model of 4 transformer layers), so ``offload_layers=5`` passed."""
    import pytest

    from memopt.errors import ConfigError

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))

    model = EncDec()
    model.head = Head()
    with pytest.raises(ConfigError) as e:
        memopt.optimize(model, offload_layers=4)
    assert "below the number of layers (4:" in str(e.value)
    assert str(e.value).endswith("layer containers: decoder.layers (2), encoder.layers (2)")


def test_a_longer_list_of_small_heads_loses_to_the_layers_holding_the_weights():
    """SAM (sweep 8): four mask-decoder heads, each an MLP with submodules, outnumber the two
    encoder layers; the layers are the stack that holds the most parameters."""
    from memopt.api import model_layers

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj_in, self.proj_out = nn.Linear(16, 4), nn.Linear(4, 2)

    class Sam(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Module()
            self.encoder.layers = nn.ModuleList(
                nn.Sequential(nn.Linear(16, 64), nn.Linear(64, 16)) for _ in range(2)
            )
            self.heads = nn.ModuleList(Mlp() for _ in range(4))

    sam = Sam()
    assert model_layers(sam) == list(sam.encoder.layers)
    # without the weights' difference the longer list wins, as before
    sam.encoder.layers = nn.ModuleList(nn.Sequential(nn.Linear(2, 2)) for _ in range(2))
    assert model_layers(sam) == list(sam.heads)


def test_a_second_tower_named_otherwise_is_said_to_stay_on_the_device():
    """CLAP (sweep 8): a text tower's ``encoder.layer`` and an audio tower's ``layers`` are two
    stacks with different names; ``offload_layers`` numbers the heavier one's layers and warns
    that the other is not offloaded. Small heads beside the layers stay quiet."""
    import warnings

    import memopt

    def stack(n, width):
        return nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(n))

    class TwoTowers(nn.Module):
        def __init__(self, audio_width: int) -> None:
            super().__init__()
            self.text = nn.Module()
            self.text.encoder = nn.Module()
            self.text.encoder.layer = stack(2, 16)
            self.audio = nn.Module()
            self.audio.layers = stack(2, audio_width)

        def forward(self, x, y):
            for m in self.text.encoder.layer:
                x = m(x)
            for m in self.audio.layers:
                y = m(y)
            return x.sum() + y.sum()

    with pytest.warns(UserWarning) as got:
        memopt.optimize(TwoTowers(12), offload_layers=1)
    texts = [str(w.message) for w in got if "not offloaded" in str(w.message)]
    assert texts == [
        "memopt: offload_layers and the sync dict number the layers of text.encoder.layer; the "
        "other stack(s) of repeated layers audio.layers (2) are not offloaded (pass layers= to "
        "number another stack instead)"
    ]
    with warnings.catch_warnings(record=True) as quiet:  # a stack of under a quarter: heads
        warnings.simplefilter("always")
        memopt.optimize(TwoTowers(4), offload_layers=1)
        memopt.optimize(TwoTowers(12), offload_layers=1, layers="audio.layers")
    assert not [w for w in quiet if "not offloaded" in str(w.message)]
