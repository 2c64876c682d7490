"""A backward that keeps the graph (``retain_graph=True``) through memopt's regions. memopt
lowers each backward with its forward, so AOTAutograd donates the saved tensors to it (plain
torch.compile lowers it at the first backward and donates nothing when that one keeps the
graph): a memopt error that says so and names the setting, before torch's own; with
``donated_buffer`` off, two backwards give torch.compile's gradients, recomputed or offloaded."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memopt
from memopt import _torch_compat as compat
from tests.helpers import tiny_llama


def _two_backwards(kind) -> tuple[dict, dict, nn.Module]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny_llama()
    ids = torch.randint(1, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    run = torch.compile(model) if kind is None else memopt.optimize(model, **kind)
    loss = run(input_ids=ids, labels=ids).loss
    loss.backward(retain_graph=True)
    first = {n: p.grad.clone() for n, p in model.named_parameters()}
    (2 * loss).backward()
    return first, {n: p.grad.clone() for n, p in model.named_parameters()}, run


def test_a_kept_graph_through_donated_buffers_is_a_memopt_error():
    with compat.no_compile_caches(), pytest.raises(memopt.KeptGraphError) as err:
        _two_backwards({"level": 1})
    msg = str(err.value)
    assert msg.startswith("memopt: backward(retain_graph=True) (or create_graph=True) reached ")
    assert "torch._functorch.config.donated_buffer = False before the first step" in msg


@pytest.fixture(scope="module")
def compiled_grads():
    """torch.compile's gradients after each of the two backwards (one compile for both kinds)."""
    with compat.no_compile_caches(), torch._functorch.config.patch(donated_buffer=False):
        return _two_backwards(None)[:2]


@pytest.mark.parametrize("kind", [{"level": 1}, {"offload_layers": 1, "offload_min_bytes": 0}])
def test_with_donation_off_two_backwards_give_torch_compiles_gradients(kind, compiled_grads):
    want1, want2 = compiled_grads
    with compat.no_compile_caches(), torch._functorch.config.patch(donated_buffer=False):
        got1, got2, run = _two_backwards(kind)
    rep = memopt.report(run)
    assert rep.regions[0].extra["donated_saved"] == 0
    if "level" in kind:
        assert rep.saved_bytes()[1] < rep.saved_bytes()[0]  # it recomputes
    else:
        assert rep.offloaded_bytes() > 0
    for name in want1:
        torch.testing.assert_close(got1[name], want1[name], msg=name)
        torch.testing.assert_close(got2[name], want2[name], msg=name)


def test_a_region_that_donates_nothing_keeps_its_graph():
    """A linear layer saves only its input (a forward input, never donated)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with compat.no_compile_caches():
        run = memopt.optimize(model, level=1)
        loss = run(x).square().sum()
        loss.backward(retain_graph=True)
        first = model.weight.grad.clone()
        loss.backward()
    assert memopt.report(run).regions[0].extra["donated_saved"] == 0
    torch.testing.assert_close(model.weight.grad, 2 * first)
