"""Layer offload through Inductor on what the forty-eighth session's sweep of unseen
architectures broke (CPU). ConvBERT's mixed attention saves a concatenation's output and a lone
permute of a whole unfold, both of which gave wrong gradients when offloaded: the cat is kept on
the device; the permute, rebuilt from a copy of its base, is right since the reload copies back
into the traced layout (Inductor's layout optimization re-lays host copies). Llama 4's rotary
saves complex views of float tensors, which an ``as_strided`` of the float base cannot rebuild
(Inductor failed to compile): they are copied themselves."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memopt
from memopt import _torch_compat as compat

transformers = pytest.importorskip("transformers")


def _model():
    torch.manual_seed(0)
    cfg = transformers.ConvBertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, embedding_size=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return transformers.ConvBertForMaskedLM(cfg).train()


def _grads(model, fn, ids) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    fn(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _offloaded_as_compiled(model, ids, atol: float) -> torch.nn.Module:
    """One step of ``offload_layers=1, offload_min_bytes=0`` against torch.compile's gradients
    (asserted); the optimized model, for its report."""
    with compat.no_compile_caches():
        torch._dynamo.reset()
        want = _grads(model, torch.compile(model), ids)
        torch._dynamo.reset()
        opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
        got = _grads(model, opt, ids)
    torch._dynamo.reset()
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=1e-4, atol=atol, msg=name)
    return opt


def test_convbert_offload_keeps_torch_compiles_gradients():
    model = _model()
    ids = torch.randint(1, 128, (4, 64), generator=torch.Generator().manual_seed(0))
    opt = _offloaded_as_compiled(model, ids, atol=1e-6)
    off = memopt.report(opt).regions[0].extra["offload"]
    rows = off["offloaded"]
    # the permute of the whole unfold, rebuilt from a copy of its base: wrong gradients until
    # the reload copied back into the traced layout (the graph's convolutions get Inductor's
    # layout optimization; checked to fail without it, fifty-fifth session)
    lone = [r for r in rows if r["via_base"] and len(r["saved"]) == 1]
    assert any(r["saved"][0].startswith("permute") for r in lone), rows
    assert not any(r["source"].startswith("cat") for r in rows)  # kept: a concatenation's
    assert any("concatenation" in k[2] for k in off["kept"])
    assert off["total_bytes"] > 0


class _Complex(nn.Module):
    """Llama 4's rotary in small: products of complex views, saved for backward."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.q, self.k, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        def c(t):
            return torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))

        return x + self.o(torch.view_as_real(c(self.q(x)) * c(self.k(x))).flatten(-2))


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Complex() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x.square().mean()


def test_complex_views_are_offloaded_as_themselves():
    torch.manual_seed(0)
    model, x = _Stack(), torch.randn(4, 16, 32)
    with compat.no_compile_caches():
        torch._dynamo.reset()
        torch.compile(model)(x).backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        torch._dynamo.reset()
        opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
        opt(x).backward()
    torch._dynamo.reset()
    for p, g in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
    off = memopt.report(opt).regions[0].extra["offload"]
    complex_rows = [r for r in off["offloaded"] if not r["via_base"] and "conj" in r["source"]]
    assert len(complex_rows) == 2, off["offloaded"]  # both complex factors, copied themselves


def test_mamba2_offload_rebuilds_its_lone_gated_norm_view_from_its_base():
    """Mamba2 (forty-ninth session's sweep): the gated RMSNorm's input ``y.reshape(b, T, -1)``
    (view_32 of add_4) is a lone saved view covering its base. Rebuilt by ``as_strided`` from a
    copy of the base, the gate's, in_proj's, norm's and embedding's gradients were wrong by
    their own size (the loss right) until the reload copied back into the traced layout (the
    graph has a convolution, so Inductor's layout optimization re-lays host copies)."""
    torch.manual_seed(0)
    cfg = transformers.Mamba2Config(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2,
        head_dim=16, num_heads=8, n_groups=1, chunk_size=8, bos_token_id=0, eos_token_id=0,
        pad_token_id=0,
    )  # fmt: skip
    model = transformers.Mamba2ForCausalLM(cfg).train()
    ids = torch.randint(1, 128, (4, 16), generator=torch.Generator().manual_seed(0))
    opt = _offloaded_as_compiled(model, ids, atol=1e-5)
    rows = memopt.report(opt).regions[0].extra["offload"]["offloaded"]
    lone = [r for r in rows if r["via_base"] and len(r["saved"]) == 1]
    assert lone, rows  # rebuilt from their bases' copies
    assert sum(r["nbytes"] for r in rows) > 0
