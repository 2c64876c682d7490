"""An attention kernel in a graph Inductor lays out channels-last is not recomputed. torch
wraps a recomputed attention kernel (it carries the random tag for its ``dropout_p``) in an
RNG-state op; in a graph with convolutions Inductor's layout optimization then hands that op
channels-last q, k and v, and on the CPU the kernel's results were wrong: with the plan
``Attention+:1:1`` diffusers' Transformer2DModel (a 1x1 convolution in, attention, a 1x1
convolution out) gave a loss of nan or inf where torch.compile gives 1.178, and
``budget=0.5`` chose that plan on ControlNet (sweep 4, docs/data/sweep4/REPORT.md). With
Inductor's layout optimization off the same plan was right."""

from __future__ import annotations

import pytest
import torch

import memopt
from memopt import _torch_compat as compat
from memopt.passes.find_recompute_subgraphs import ATTENTION_CHANNELS_LAST

diffusers = pytest.importorskip("diffusers")


def _step(net, run, x):
    net.zero_grad(set_to_none=True)
    loss = run(hidden_states=x).sample.pow(2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in net.named_parameters()}


def test_a_plan_naming_attention_in_a_conv_graph_keeps_it_and_torch_compiles_numbers():
    torch.manual_seed(0)
    net = diffusers.Transformer2DModel(
        num_attention_heads=4, attention_head_dim=8, in_channels=32, norm_num_groups=8
    ).train()
    x = torch.randn(2, 32, 16, 16, generator=torch.Generator().manual_seed(0))
    with compat.no_compile_caches():
        want_loss, want = _step(net, torch.compile(net), x)
        torch._dynamo.reset()
        opt = memopt.optimize(net, config="Attention+:1:1")
        loss, got = _step(net, opt, x)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=1e-4, atol=1e-5, msg=name)
    region = memopt.report(opt).regions[0]
    # the plan is told why, not that the id is unknown
    assert region.warnings == [
        f"plan 'Attention+:1:1': no cluster 'Attention+' in this region: {ATTENTION_CHANNELS_LAST}"
    ], region.warnings
    # the attention output is saved, with the reason, and no cluster recomputes attention
    assert any(e["reason"] == ATTENTION_CHANNELS_LAST for e in region.excluded), region.excluded
    assert not any(c["cluster_id"].startswith("Attention") for c in region.clusters)
