"""A model whose layers ran eagerly while the rest compiled: memopt says which, and why when it
can tell (gradient checkpointing Dynamo could not trace, as HF's under transformers 5 on torch
2.13), after the first forward that trains (memopt.coverage.layers_not_compiled). Layers that
compiled frame by frame (a graph break inside each) are no such case."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import memopt


class _Block(nn.Module):
    def __init__(self, d: int = 16, *, eager: bool = False, broken: bool = False) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.eager, self.broken, self.skip = eager, broken, False

    def forward(self, x):
        if self.skip:  # LayerDrop, or a layer the model does not use
            return x
        if self.eager:
            return self._eager(x)
        h = torch.relu(self.a(x))
        if self.broken:
            torch._dynamo.graph_break()
        return x + self.b(h)

    @torch._dynamo.disable
    def _eager(self, x):
        return x + self.b(torch.relu(self.a(x)))


class _Stack(nn.Module):
    def __init__(self, eager, broken: bool, checkpointed: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(eager=i in eager, broken=broken) for i in range(4))
        for layer in self.layers:
            layer.gradient_checkpointing = checkpointed  # as HF's layers carry it

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)
        return h


class _Net(nn.Module):
    """The layer loop in a module of its own, as HF's (``LlamaModel`` inside the LM): where
    Dynamo skips the loop's frame, the rest still compiles."""

    def __init__(self, eager=(), broken: bool = False, checkpointed: bool = False) -> None:
        super().__init__()
        self.emb = nn.Linear(8, 16)
        self.body = _Stack(eager, broken, checkpointed)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.body(torch.tanh(self.emb(x)))).square().mean()


def _said(caplog, skip=(), **net) -> list[str]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Net(**net)
    for i in skip:
        model.body.layers[i].skip = True
    opt = memopt.optimize(model, level=1)
    x = torch.randn(4, 8)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        for _ in range(2):
            opt(x).backward()
    said = [m for m in caplog.messages if "in no graph torch.compile compiled" in m]
    assert list(memopt.report(opt).notes) == [m.removeprefix("memopt: ") for m in said]
    return said


def test_layers_that_ran_eagerly_are_named_once(caplog):
    (said,) = _said(caplog, eager=(1, 2))
    assert said == (
        "memopt: 2 of the model's 4 layers (body.layers.1-2) are in no graph torch.compile "
        "compiled: they ran eagerly, so level=1 reached only the rest of the model. "
        "torch._dynamo.explain(model)(*inputs) lists the graph breaks and skipped frames."
    )


def test_a_layer_that_did_not_run_is_not_said_to_have_run_eagerly(caplog):
    # layer 3 skipped (LayerDrop), layer 1 eager: only layer 1 is named
    (said,) = _said(caplog, eager=(1,), skip=(3,))
    assert "1 of the model's 4 layers (body.layers.1) is in no graph" in said


def test_checkpointed_layers_that_ran_eagerly_say_memopt_replaces_checkpointing(caplog):
    (said,) = _said(caplog, eager=(0, 1, 2, 3), checkpointed=True)
    assert "4 of the model's 4 layers (body.layers.0-3) are in no graph" in said
    assert "turn checkpointing off (model.gradient_checkpointing_disable())" in said


@pytest.mark.parametrize("net", [{}, {"broken": True}], ids=["whole", "graph break in each"])
def test_layers_that_compiled_say_nothing(caplog, net):
    # with a break inside each layer, Dynamo compiles every layer's frame on its own (module
    # paths relative to the layer): its weights, read by those graphs, tell it compiled
    assert _said(caplog, **net) == []


def test_hf_checkpointed_layers_are_said_exactly_when_they_ran_eagerly(caplog):
    """HF's gradient checkpointing: under transformers 5 on torch 2.13 Dynamo skips the
    checkpointed layers (a context variable set inside the checkpoint); where it traces them,
    nothing is said. Either way the note matches what the saved-tensor hooks measured."""
    from memopt.measure import measure_saved
    from tests.helpers import tiny_llama

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny_llama(num_hidden_layers=2)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = memopt.optimize(model, level=1)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    exclude = [*model.parameters(), *model.buffers(), ids]
    with caplog.at_level(logging.WARNING, logger="memopt"):
        loss, saved = measure_saved(lambda: opt(input_ids=ids, labels=ids).loss, exclude)
        loss.backward()
    said = [m for m in caplog.messages if "in no graph torch.compile compiled" in m]
    assert len(said) == (1 if saved.eager else 0), (saved.eager, caplog.messages)
    if said:
        assert "2 of the model's 2 layers (model.layers.0-1)" in said[0]
        assert "gradient_checkpointing_disable()" in said[0]
