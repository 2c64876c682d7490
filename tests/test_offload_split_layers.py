"""``offload_layers`` on models whose compiled regions hold fewer layers than the model (the
forty-ninth session's sweep): a graph break that leaves one layer alone in a region, and a
weight-normed module whose parametrizations (a ModuleList of transforms) were taken for a stack
of one layer. Each raised "offload_layers=1 must be below the number of layers (1)" from inside
Inductor's partitioner though the model has four layers; now the region says why it offloads
nothing, and the gradients are torch.compile's. ``offload_layers`` and the sync dict count the
model's layers in such regions too (issue 14): a region of layers 2-3 of four offloads nothing for
``offload_layers=1`` (before, it offloaded its own first layer, so that two were offloaded)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import memopt
from memopt import _torch_compat as compat


class _Block(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)))


class _Net(nn.Module):
    """Four layers; ``front``: a weight-normed linear before them; ``alone``: layers before
    the graph break."""

    def __init__(self, alone: int, normed: bool) -> None:
        super().__init__()
        self.alone = alone
        self.front = weight_norm(nn.Linear(32, 32)) if normed else nn.Identity()
        self.layers = nn.ModuleList(_Block() for _ in range(4))
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        h = torch.tanh(self.front(x))
        for layer in self.layers[: self.alone]:
            h = layer(h)
        torch._dynamo.graph_break()
        for layer in self.layers[self.alone :]:
            h = layer(h)
        return self.head(h).square().mean()


def _grads(model: nn.Module, run, x) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    run(x).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def compiled():
    """torch.compile's gradients per (alone, normed): one plain compile of each net (seeded
    alike, so its weights and inputs are those of every test that builds it), shared."""
    return {}


def _run(alone: int, normed: bool, caplog, compiled, **setting):
    torch.manual_seed(0)
    model, x = _Net(alone, normed), torch.randn(8, 32)
    with compat.no_compile_caches():
        if (alone, normed) not in compiled:
            torch._dynamo.reset()
            compiled[alone, normed] = _grads(model, torch.compile(model), x)
        want = compiled[alone, normed]
        torch._dynamo.reset()
        opt = memopt.optimize(model, offload_min_bytes=0, **setting)
        with caplog.at_level(logging.WARNING, logger="memopt"):
            got = _grads(model, opt, x)
    torch._dynamo.reset()
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, msg=name)
    return memopt.report(opt).regions


def _offloaded(region) -> list[int]:
    """The region's layers (its own numbering) whose saved tensors went to the host."""
    return sorted(int(k) for k in region.extra.get("offload", {}).get("bytes_per_layer", {}))


@pytest.mark.parametrize("alone, normed", [(1, False), (0, True)])
def test_a_region_with_too_few_layers_offloads_nothing_and_says_why(
    alone, normed, caplog, compiled
):
    first, rest = _run(alone, normed, caplog, compiled, offload_layers=1)
    names = first.extra.get("layers", {}).get("names", [])
    assert names == (["layers.0"] if alone else [])  # no parametrization is a layer
    said = [m for m in caplog.messages if "offload_layers=1: this compiled region holds" in m]
    assert len(said) == (1 if alone else 0)
    # the model's layer 0 is alone in the first region: the second (layers 1-3) has none of
    # the first k=1; without the break, the one region holds all four and offloads layer 0
    assert _offloaded(rest) == ([] if alone else [0])
    if alone:
        assert "holds the model's layer 0 of 4" in said[0], said


@pytest.mark.parametrize(
    "alone, setting, first_layers, rest_layers, note",
    [
        (1, {"offload_layers": 2}, [], [0], "layer 0 of 4"),  # the model's layer 1
        (2, {"offload_layers": 1}, [0], [], None),
        (2, {"offload_layers": 3}, [0], [0], "layers 0-1 of 4 (a graph break"),
        (2, {"sync": {2: (True, 3, False, 0)}}, [], [0], None),
        (2, {"sync": {1: (True, 3, False, 2)}}, [1], [], "lie in other regions"),
    ],
)
def test_offload_settings_count_the_models_layers_across_regions(
    alone, setting, first_layers, rest_layers, note, caplog, compiled
):
    """Regions of layers 0..alone-1 and alone..3: the setting's layers land in the region
    holding them, on that region's own schedule, and the gradients are torch.compile's."""
    first, rest = _run(alone, False, caplog, compiled, **setting)
    assert (_offloaded(first), _offloaded(rest)) == (first_layers, rest_layers)
    said = [m for m in caplog.messages if "this compiled region holds the model's" in m]
    assert [note in m for m in said] == ([True] if note else []), said
    assert not any("moved no bytes" in m or "nothing moved" in m for m in caplog.messages)
