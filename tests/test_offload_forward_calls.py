"""Layers run as ``layer.forward(x)`` (SqueezeBERT's encoder, the third sweep's continuation):
Dynamo puts a module on a node's stack only when the module is called, so no node carried the
layer's own path (``encoder.layers.0``), only its children's, and ``offload_layers=1`` offloaded
nothing without a word. The layer is now read from the first numbered component of a child's
path."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import memopt
from memopt import _torch_compat as compat

D = 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class ForwardCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)  # not layer(x): the layer itself is on no module stack
        return x.square().mean()


def _grads(fn, model, *args, **kwargs):
    model.zero_grad(set_to_none=True)
    out = fn(*args, **kwargs)
    (out.loss if hasattr(out, "loss") else out).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _offload_against_compile(model, *args, **kwargs):
    with compat.no_compile_caches():
        torch._dynamo.reset()
        ref = _grads(torch.compile(model), model, *args, **kwargs)
        torch._dynamo.reset()
        opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
        got = _grads(opt, model, *args, **kwargs)
    torch._dynamo.reset()
    for name, g in ref.items():
        err = float((got[name] - g).abs().max() / g.abs().max().clamp_min(1e-30))
        assert err < 1e-5, (name, err)
    return memopt.report(opt).regions[0].extra["offload"]


def test_layers_run_by_their_forward_are_offloaded():
    torch.manual_seed(0)
    off = _offload_against_compile(ForwardCalls(), torch.randn(8, 32, D))
    # layer 0's saved activations (norm, up, gelu inputs: 8 x 32 rows), nothing of the others
    assert set(map(int, off["bytes_per_layer"])) == {0}
    assert off["total_bytes"] > 0


def test_squeezebert_offloads_its_first_layer():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.SqueezeBertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, embedding_size=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, q_groups=2, k_groups=2, v_groups=2,
        post_attention_groups=2, intermediate_groups=2, output_groups=2, pad_token_id=0,
    )  # fmt: skip
    model = transformers.SqueezeBertForMaskedLM(cfg).train()
    ids = torch.randint(1, 128, (4, 32), generator=torch.Generator().manual_seed(0))
    off = _offload_against_compile(model, input_ids=ids, labels=ids)
    assert set(map(int, off["bytes_per_layer"])) == {0} and off["total_bytes"] > 0
