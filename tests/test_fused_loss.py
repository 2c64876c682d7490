"""``fuse_loss=True``: a linear layer feeding ``cross_entropy`` becomes one op that computes the
loss and the layer's gradients in the forward (memopt/fused_loss.py, passes/fuse_loss.py).
Losses and gradients equal torch.compile's; the backward saves the layer's gradients, not the
logits (exact bytes); what cannot be fused is named."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import memopt
from memopt import fused_loss
from memopt.config import resolve_config
from memopt.errors import ConfigError
from memopt.symbolic import fmt_bytes
from tests.helpers import compare, tiny_llama

N, H, V = 64, 16, 40  # tokens, hidden, classes: N > H, so the weight's gradient is the smaller


class Head(nn.Module):
    """A norm, a linear layer with a bias and a summed cross-entropy; returns the loss only
    (the fused op computes the logits itself, chunk by chunk)."""

    def __init__(self, reduction="sum", smoothing=0.0, cap=None, returns_logits=False, add=False,
                 scale=None):  # fmt: skip
        super().__init__()
        self.scale = scale  # "*2.5" (Cohere's logit_scale) or "/4" (Granite's logits_scaling)
        self.norm = nn.LayerNorm(H)
        self.proj = nn.Linear(H, V)
        self.reduction, self.smoothing, self.cap = reduction, smoothing, cap
        self.returns_logits = returns_logits
        # a constant bias after the layer, as BART's final_logits_bias
        self.register_buffer("final_bias", torch.randn(1, V) if add else None)

    def forward(self, x, labels):
        logits = self.proj(self.norm(x))
        if self.final_bias is not None:
            logits = logits + self.final_bias
        if self.scale is not None:
            n = float(self.scale[1:])
            logits = (logits * n if self.scale[0] == "*" else logits / n).contiguous()  # OPT's
        if self.cap == "sigmoid":  # not a linear layer's output any more
            logits = torch.sigmoid(logits)
        elif self.cap is not None:  # Gemma 2's soft-cap
            logits = torch.tanh(logits / self.cap) * self.cap
        flat = logits.float().view(-1, V)
        kw = dict(reduction=self.reduction, label_smoothing=self.smoothing)
        loss = F.cross_entropy(flat, labels.view(-1), **kw)
        return (loss, logits) if self.returns_logits else loss


def _inputs(ignored=8):
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, V, (4, N // 4), generator=g)
    labels.view(-1)[:ignored] = -100
    return {"x": torch.randn(4, N // 4, H, generator=g, requires_grad=True), "labels": labels}


def _fused(rep):
    return [f for r in rep.regions for f in (r.extra.get("fused_loss") or {}).get("losses", ())]


def test_llama_fused_matches_torch_compile_and_the_report_says_what_was_fused():
    model = tiny_llama(num_hidden_layers=1)
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :5] = -100
    rep, _, measured, _ = compare(model, {"input_ids": ids, "labels": labels}, level=1,
                                  fuse_loss=True)  # fmt: skip
    (f,) = _fused(rep)
    assert (f["module"], f["tokens"], f["hidden"], f["vocab"]) == ("lm_head", 64, 64, 128)
    assert f["logits_reused"] and f["chunks"] == 1  # the model returns its logits: read whole
    assert "Fused loss: lm_head (64 -> 128, float32)" in rep.table()
    # the graph's saved bytes are exact; beside them the rotary embedding's inv_freq buffer
    # (8 float32), which the helper does not leave out (the layer's input, which the returned
    # logits' gradient would need, is held by the logits, not saved: LogitsGrad)
    assert rep.saved_bytes()[1] + 8 * 4 == measured


def test_a_budget_fuses_by_default_and_its_estimates_are_the_fused_graphs_measurements():
    """With a budget the loss is fused unless asked otherwise; the report's before is the fused
    graph's level-0 bytes (as memopt compiles it), its after the plan's, both measured."""
    model = tiny_llama(num_hidden_layers=2)
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    inputs = {"input_ids": ids, "labels": ids}
    level0, _, fused0, _ = compare(model, inputs, fuse_loss=True)
    rep, unfused, measured, _ = compare(model, inputs, budget=0.5)
    assert _fused(rep) and rep.config.sources["fuse_loss"] == "default with a budget"
    before, after = rep.saved_bytes()
    assert before == level0.saved_bytes()[0] and before + 8 * 4 == fused0 < unfused
    assert after + 8 * 4 == measured < fused0
    # the table says which "before" it is: torch.compile's unfused graph also holds the logits
    assert f"{fmt_bytes(before)} without memopt's plans (the loss fused: it holds no logits), " in (
        rep.table().replace("\n        ", " ")
    )


def test_the_returned_logits_get_their_gradient_when_a_loss_reads_them():
    torch.manual_seed(0)
    model = Head(reduction="mean", returns_logits=True)
    loss_fn = lambda out: out[0] + 0.3 * out[1].pow(2).mean()  # noqa: E731
    rep = compare(model, _inputs(), loss_fn=loss_fn, fuse_loss=True)[0]
    assert _fused(rep)[0]["logits_reused"]


def test_computed_logits_in_chunks_with_a_bias_and_a_sum_exact_bytes(monkeypatch):
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", N * V * 4 // 4)  # four chunks
    torch.manual_seed(0)
    model = Head()
    rep, _, measured, _ = compare(model, _inputs(), loss_fn=lambda loss: loss, fuse_loss=True)
    (f,) = _fused(rep)
    assert (f["chunks"], f["reduction"], f["logits_reused"]) == (4, "sum", False)
    # saved for the backward: the input's, the weight's and the bias's gradients (no logits),
    # and the norm's mean and reciprocal deviation per token
    saved = N * H * 4 + V * H * 4 + V * 4 + 2 * N * 4
    assert rep.saved_bytes() == (saved, saved)
    assert measured == saved


def test_returned_logits_in_vocabulary_parts_exact_bytes(monkeypatch):
    """The logits' gradient made a vocabulary part at a time (16, 16 and 8 of the 40 classes):
    the weight's and bias's gradients joined from the parts, the input's summed over them."""
    monkeypatch.setattr(fused_loss, "PART_ALIGN", 8)
    monkeypatch.setattr(fused_loss, "PART_BYTES", N * V * 4 // 3)
    assert fused_loss.vocab_bounds(V, 3) == [(0, 16), (16, 32), (32, 40)]
    assert fused_loss.vocab_bounds(V, 8) == [(0, 8), (8, 16), (16, 24), (24, 32), (32, 40)]
    torch.manual_seed(0)
    model = Head(reduction="mean", returns_logits=True)
    rep, _, measured, _ = compare(model, _inputs(), loss_fn=lambda out: out[0], fuse_loss=True)
    (f,) = _fused(rep)
    assert (f["chunks"], f["logits_reused"]) == (3, True)
    assert "their gradient in 3 vocabulary part(s)" in rep.table()
    assert "never the logits (64 x 40, 10.00 KiB)" in rep.table()
    # saved: the input's gradient, the weight's and the bias's in three parts each, the norm's
    # mean and reciprocal deviation per token
    saved = N * H * 4 + V * H * 4 + V * 4 + 2 * N * 4
    assert rep.saved_bytes() == (saved, saved)
    assert measured == saved


def test_vocabulary_parts_are_held_one_at_a_time_as_inductor_compiles_them(monkeypatch):
    """Inductor would fuse the parts' pointwise kernels (they read the same log-sum-exp) into
    one and hold every part at once (four 8 MiB parts here: the forward's compiled peak was
    15.7 MB over the model's); ``memopt::after`` orders each part after the previous part's
    matmuls, and the compiled peak is the planner's model."""
    n, v = 2048, 4096

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.proj = nn.LayerNorm(H), nn.Linear(H, v, bias=False)

        def forward(self, x, labels):
            logits = self.proj(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, v), labels.view(-1)), logits

    peaks = {}
    for parts in (1, 4):
        monkeypatch.setattr(fused_loss, "PART_BYTES", n * v * 4 // parts)
        torch._dynamo.reset()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, H, generator=g, requires_grad=True)
        opt = memopt.optimize(Net(), budget=10**12)
        opt(x, torch.randint(0, v, (n,), generator=g))[0].backward()
        (region,) = memopt.report(opt).regions
        assert region.extra["fused_loss"]["losses"][0]["chunks"] == parts
        sec = region.extra["inductor"]
        peaks[parts] = sec["fwd_peak"]
        assert abs(sec["fwd_peak"] - sec["model_peak"]) <= 64  # as the model has it
    # about three of the four parts of the logits' gradient (2,048 x 4,096 float32) fewer
    assert peaks[1] - peaks[4] > n * v * 4 * 2 // 4


@pytest.mark.parametrize("returns_logits", [False, True])
def test_a_constant_bias_after_the_layer_is_fused_too(monkeypatch, returns_logits):
    """BART's ``final_logits_bias`` (a buffer added to the head's output): added to each chunk
    of computed logits, or already in the logits the model returns."""
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", N * V * 4 // 2)
    torch.manual_seed(0)
    model = Head(reduction="mean", add=True, returns_logits=returns_logits)
    loss_fn = (lambda out: out[0]) if returns_logits else (lambda loss: loss)
    rep = compare(model, _inputs(), loss_fn=loss_fn, fuse_loss=True)[0]
    (f,) = _fused(rep)
    assert (f["chunks"], f["logits_reused"]) == ((1, True) if returns_logits else (2, False))


@pytest.mark.parametrize("returns_logits", [False, True])
@pytest.mark.parametrize("scale", ["*2.5", "/4"])
def test_scaled_logits_are_fused_too(monkeypatch, returns_logits, scale):
    """Cohere's ``logits * logit_scale`` and Granite's ``logits / logits_scaling`` after a bias
    (BART's), then ``contiguous`` (OPT's): the loss's gradient reaches the layer through the
    scale, inside the graph and (returned logits read by a loss) outside it."""
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", N * V * 4 // 2)
    torch.manual_seed(0)
    model = Head(reduction="mean", add=True, returns_logits=returns_logits, scale=scale)
    loss_fn = (lambda out: out[0] + out[1].pow(2).mean()) if returns_logits else (lambda x: x)
    rep = compare(model, _inputs(), loss_fn=loss_fn, fuse_loss=True)[0]
    (f,) = _fused(rep)
    assert f["logits_reused"] == returns_logits


@pytest.mark.parametrize("returns_logits", [False, True])
def test_soft_capped_logits_are_fused_too(monkeypatch, returns_logits):
    """Gemma 2's ``tanh(logits / cap) * cap`` (cap 3: most logits of the random layer are
    bent by it): the loss's gradient reaches the layer through the tanh, inside the graph and
    (returned logits read by a loss) outside it, where the layer's output is computed again."""
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", N * V * 4 // 2)
    monkeypatch.setattr(fused_loss, "PART_ALIGN", 8)
    monkeypatch.setattr(fused_loss, "PART_BYTES", N * V * 4 // 3)
    torch.manual_seed(0)
    model = Head(reduction="mean", returns_logits=returns_logits, cap=3.0, scale="*2.5")
    loss_fn = (lambda out: out[0] + out[1].pow(2).mean()) if returns_logits else (lambda x: x)
    rep = compare(model, _inputs(), loss_fn=loss_fn, fuse_loss=True)[0]
    (f,) = _fused(rep)
    assert (f["cap"], f["scale"], f["chunks"]) == ((3.0, 1 / 3.0), 2.5, 3 if returns_logits else 2)
    assert "soft-capped (3 * tanh(0.333333 * x))" in rep.table()


def test_dynamic_token_counts_and_a_bfloat16_loss():
    torch.manual_seed(0)
    model = Head(reduction="mean").to(torch.bfloat16)
    for ignored in (8, 0):
        inputs = _inputs(ignored)
        inputs["x"] = inputs["x"].detach().to(torch.bfloat16).requires_grad_()
        torch._dynamo.reset()
        ref = torch.compile(model, dynamic=True)(**inputs)
        opt = memopt.optimize(model, fuse_loss=True, dynamic=True)
        got = opt(**inputs)
        assert _fused(memopt.report(opt))  # fused at symbolic token counts
        assert got.dtype == ref.dtype == torch.float32  # the loss of the float32 logits
        torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)


def test_every_target_ignored_gives_torchs_nan_loss_and_zero_gradients():
    torch.manual_seed(0)
    model = Head(reduction="mean")
    inputs = _inputs(ignored=N)
    torch._dynamo.reset()
    ref = torch.compile(model)(**inputs)
    ref.backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    opt = memopt.optimize(model, fuse_loss=True)
    got = opt(**inputs)
    got.backward()
    assert _fused(memopt.report(opt))
    assert ref.isnan() and got.isnan()
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, w)


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (Head(smoothing=0.1), "it smooths its labels"),
        (Head(cap="sigmoid"), "casts and views but 'logits_1' (sigmoid's result)"),
    ],
)
def test_a_loss_that_cannot_be_fused_is_named(caplog, model, reason):
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger="memopt"):
        loss = memopt.optimize(model, fuse_loss=True)(**_inputs())
    loss.backward()
    assert "fuse_loss=True: cross_entropy 'loss' not fused: " in caplog.text
    assert reason in caplog.text


def test_with_a_budget_losses_are_fused_by_default_and_one_that_cannot_be_is_no_warning(caplog):
    torch.manual_seed(0)
    model = Head(reduction="mean")
    rep = compare(model, _inputs(), loss_fn=lambda loss: loss, budget=0.5)[0]
    assert _fused(rep) and rep.config.sources["fuse_loss"] == "default with a budget"
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="memopt"):
        memopt.optimize(Head(smoothing=0.1), budget=0.5)(**_inputs()).backward()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "fuse" in r.message]
    assert (
        "fuse_loss (the default with a budget): cross_entropy 'loss' not fused: it smooths"
        in caplog.text
    )


def test_a_loss_outside_the_compiled_model_is_said():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(H, H), nn.ReLU(), nn.Linear(H, V))
    torch._dynamo.reset()
    opt = memopt.optimize(model, fuse_loss=True)
    inputs = _inputs()
    F.cross_entropy(opt(inputs["x"]).view(-1, V), inputs["labels"].view(-1)).backward()
    assert any("fuse_loss=True fused nothing" in n for n in memopt.report(opt).notes)


def test_the_setting(monkeypatch):
    assert not resolve_config().fuse_loss
    # on by default with a budget; off when asked
    c = resolve_config(budget=0.5)
    assert (c.fuse_loss, c.sources["fuse_loss"]) == (True, "default with a budget")
    assert not resolve_config(budget=0.5, fuse_loss=False).fuse_loss
    monkeypatch.setenv("MEMOPT_FUSE_LOSS", "1")
    assert resolve_config().fuse_loss
    assert not resolve_config(fuse_loss=False).fuse_loss
    monkeypatch.setenv("MEMOPT_FUSE_LOSS", "maybe")
    with pytest.raises(ConfigError, match="MEMOPT_FUSE_LOSS='maybe' is not a boolean"):
        resolve_config()
