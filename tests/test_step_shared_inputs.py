"""The step's saved bytes where regions save graph inputs that are activations of the step
(diffusers' Mochi, sweep 7: the level-0 estimate 8,192 B short): a convolution's input that
Inductor saves as a channels-last copy, not the input's own storage; and a view whose base
has a size of its own (a dynamic region that runs at two sizes in one step saves the whole
base, sized by the base's symbol)."""

from __future__ import annotations

import torch
import torch.nn as nn

import memopt
from memopt.measure import measure_saved


def _level0(model: nn.Module, *inputs: torch.Tensor) -> tuple[memopt.Report, int]:
    """memopt level 0 on ``model``: its report after one step, and the bytes the compiled
    regions saved in it, measured."""
    torch._dynamo.reset()
    opt = memopt.optimize(model, level=0)
    exclude = [*model.parameters(), *inputs]
    loss, saved = measure_saved(lambda: opt(*inputs), exclude)
    loss.backward()
    return memopt.report(opt), saved.compiled


class PatchEmbed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 2, stride=2)

    def forward(self, x):
        img = x * 2.0  # made by the step without autograd: a shared activation input
        torch._dynamo.graph_break()
        return self.conv(img).pow(2).mean()


def test_a_convolutions_saved_input_is_its_channels_last_copy_counted_once():
    torch.manual_seed(0)
    model = PatchEmbed()
    rep, measured = _level0(model, torch.randn(2, 4, 8, 8))
    ((r, _),) = rep.step_runs()
    # the graph saves its shared input (2,048 B), but Inductor keeps a channels-last copy of it
    # (2,048 B) and of the weight (512 B) in their place, with the convolution's output
    # (1,024 B): the input's own storage is not held, so no saved input row adds it again
    assert r.baseline_saved_bytes == 2048 + 512 + 1024
    assert not r.extra.get("saved_inputs")
    assert measured == 3584
    assert rep.saved_bytes() == (measured, measured)


class Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(16))

    def forward(self, v):
        torch._dynamo.graph_break()  # compiled on its own: one region for every call
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w


class Heads(nn.Module):
    """Mochi's per-sample attention: queries of 32 and 8 tokens split into heads (views of
    (2, n, 32) bases) and normed by one module: the norm compiles for 32, again for any size
    at 8, and a call after the next graph break (32 tokens again) runs that dynamic graph."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.norm = Norm()

    def forward(self, x, y):
        a, b = self.proj(x), self.proj(y)
        n1 = self.norm(a.unflatten(2, (2, 16)))
        n2 = self.norm(b.unflatten(2, (2, 16)))
        a2 = a + 1.0
        torch._dynamo.graph_break()
        n3 = self.norm(a2.unflatten(2, (2, 16)))
        return n1.pow(2).mean() + n2.pow(2).mean() + n3.pow(2).mean()


def test_a_saved_views_base_is_sized_at_each_runs_own_sizes():
    torch.manual_seed(0)
    model = Heads()
    rep, measured = _level0(model, torch.randn(2, 32, 32), torch.randn(2, 8, 32))
    dynamic = [r for r, _ in rep.step_runs() if r.symbols]
    # each run of the dynamic norm saves its input's whole storage (the (2, n, 32) base:
    # 256 * n B) and its rsqrt (16 * n B): n = 8, then n = 32 (not the compile's 8)
    assert [r.baseline_saved_bytes for r in dynamic][:2] == [256 * 8 + 16 * 8, 256 * 32 + 16 * 32]
    assert measured == 38016
    assert rep.saved_bytes()[0] == measured
