"""A unit offloaded through its base when Inductor re-lays the host copy (FocalNet, the third
sweep's continuation): a graph with convolutions gets Inductor's layout optimization, which
made the forward's host output channels-last, while the backward rebuilt the saved views
(``as_strided``) with the traced layout and read other elements. The reload now copies back
into the traced layout, whatever layout the host copy came in."""

import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import memopt
from memopt import _torch_compat as compat

D = 16


class Block(nn.Module):
    """FocalNet's modulation, small: a projection made NCHW, split into query, context and
    gates (views of one base, saved), a depthwise and a 1x1 convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj_in = nn.LayerNorm(D), nn.Linear(D, 2 * D + 2)
        self.dw = nn.Conv2d(D, D, 3, padding=1, groups=D, bias=False)
        self.ctxp, self.out = nn.Conv2d(D, D, 1), nn.Linear(D, D)

    def forward(self, h):
        x = self.proj_in(self.norm(h)).permute(0, 3, 1, 2).contiguous()
        q, ctx, gates = torch.split(x, (D, D, 2), 1)
        ctx = F.gelu(self.dw(ctx))
        ctx_all = ctx * gates[:, 0:1] + F.gelu(ctx.mean((2, 3), keepdim=True)) * gates[:, 1:2]
        return h + self.out((q * self.ctxp(ctx_all)).permute(0, 2, 3, 1))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(D, 10)

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.head(x.mean((1, 2))), y)


def _grads(fn, model, x, y):
    model.zero_grad(set_to_none=True)
    fn(x, y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_views_of_a_relaid_host_copy_give_torch_compiles_gradients(device):
    """On the CPU Inductor's layout optimization is on for any graph with a convolution; on a
    GPU its heuristic skips small ones, so it is forced there (and the copies run on the side
    stream into pinned memory)."""
    torch.manual_seed(0)
    model = Net().to(device)
    x = torch.randn(8, 16, 16, D, device=device)
    y = torch.randint(0, 10, (8,), device=device)
    on_gpu = contextlib.ExitStack()
    if device == "cuda":  # channels-last forced; no TF32 (the bound is fp32's)
        on_gpu.enter_context(compat.forced_layout_optimization())
        on_gpu.enter_context(torch.backends.cudnn.flags(enabled=True, allow_tf32=False))
    with compat.no_compile_caches(), on_gpu:
        torch._dynamo.reset()
        ref = _grads(torch.compile(model), model, x, y)
        torch._dynamo.reset()
        opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
        got = _grads(opt, model, x, y)
    off = memopt.report(opt).regions[0].extra["offload"]
    assert any(r.get("via_base") for r in off["offloaded"]), off["offloaded"]
    for name, g in ref.items():
        # relative to the gradient's largest element (the wrong reads were 1.6x the bias's)
        err = float((got[name] - g).abs().max() / g.abs().max())
        assert err < 1e-5, (name, err)


def test_the_host_copies_stay_where_the_offload_put_them():
    """Inductor lays a 4-D forward output saved for backward channels-last where its layout
    optimization prefers: for a host copy, a CPU-side transposing copy into new (pageable)
    memory, which on a GPU is reloaded without overlap (Mamba2 on the H100: a blocking
    pageable copy per layer, fifty-fifth session). The forward now returns each host copy
    flat, so every reload reads the host copy in the traced layout."""
    from memopt.offload import ops

    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(8, 16, 16, D), torch.randint(0, 10, (8,))
    with compat.no_compile_caches():
        torch._dynamo.reset()
        opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
        opt(x, y).backward()  # the compile
        ops.reset_copy_stats()
        opt(x, y).backward()
    stats = ops.copy_stats()
    assert stats.h2d_copies >= 5 and stats.relaid_hosts == 0, stats
