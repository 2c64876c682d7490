"""A linear layer and its cross-entropy fused: the loss and the gradients of the layer's input,
weight and bias are computed in the forward, so the backward holds neither the logits nor their
float32 softmax, only those gradients or, where smaller, the logits' gradient in the layer's
dtype (min-cut's choice; ``passes/fuse_loss.py`` puts the op in the graph under
``fuse_loss=True``; docs/fused_loss.md).

The forward's arithmetic is the unfused backward's: per chunk of tokens the logits (the
model's own, when the graph returns them, else ``linear(h_chunk)``), cast to float32, their
log-sum-exp and ``softmax - one_hot(target)`` masked at ``ignore_index`` and scaled by the
reduction, cast to the layer's dtype; then, over all tokens at once, the two matmuls of the
linear layer's backward (a weight gradient summed over chunks would read and write the whole
weight once per chunk: 10 times 2.3 GB on Qwen2's head, +10 ms on an H100). The backward
scales the saved gradients by the loss's incoming gradient (a scalar), so a loss divided or
weighted afterwards (gradient accumulation, ``num_items_in_batch``) gets the same gradients as
unfused."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

#: fp32 logits per chunk the forward aims at (bytes); a chunk's softmax lives only inside it
CHUNK_BYTES = 256 << 20
#: at most this many chunks (each is unrolled in the compiled graph)
MAX_CHUNKS = 64


def chunk_count(tokens: int, vocab: int, chunk_bytes: int | None = None) -> int:
    """Chunks for ``tokens`` rows of ``vocab`` logits computed from the layer's input: about
    ``chunk_bytes`` (default :data:`CHUNK_BYTES`) of float32 each."""
    per = max(1, chunk_bytes if chunk_bytes is not None else CHUNK_BYTES)
    return max(1, min(MAX_CHUNKS, -(-tokens * vocab * 4 // per), tokens))


class LinearCrossEntropy(torch.autograd.Function):
    """``cross_entropy(linear(h, weight, bias), target)`` over 2-D ``h`` (tokens, hidden) and
    1-D ``target``; ``logits``: the layer's output when the graph computes it anyway (it is
    not computed again), else None. ``need``: whether h, weight and bias need gradients.
    ``added``: a constant (vocabulary,) bias added after the layer, for computed logits;
    ``scale``: the number the logits are the layer's output times."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        h: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        target: torch.Tensor,
        logits: torch.Tensor | None,
        ignore_index: int,
        reduction: str,
        chunks: int,
        need: tuple[bool, bool, bool],
        out_dtype: torch.dtype,
        added: torch.Tensor | None = None,
        scale: float = 1.0,
    ) -> torch.Tensor:
        acc = torch.float32
        valid = target != ignore_index
        per = 1.0 / valid.sum().to(acc) if reduction == "mean" else h.new_ones((), dtype=acc)
        classes = torch.arange(weight.shape[0], device=h.device)
        total = torch.zeros((), dtype=acc, device=h.device)
        grads = []

        def split(t: torch.Tensor | None) -> Any:
            return t.tensor_split(chunks) if t is not None else (None,) * chunks

        for hc, tc, vc, lc in zip(split(h), split(target), split(valid), split(logits)):
            if lc is None:  # a constant bias after the layer (final_logits_bias) added here
                lc = F.linear(hc, weight, bias)
                lc = lc if added is None else lc + added
                lc = lc if scale == 1.0 else lc * scale
            x = lc.to(acc)
            lse = torch.logsumexp(x, dim=-1)
            safe = torch.where(vc, tc, 0)
            hit = classes[None, :] == safe[:, None]
            picked = x.gather(1, safe[:, None])[:, 0]
            total = total + torch.where(vc, lse - picked, 0.0).sum()
            d = torch.exp(x - lse[:, None]) - hit.to(acc)
            # through the logits' scale (Cohere, Granite) to the layer's output
            grads.append(torch.where(vc[:, None], d * (per * scale), 0.0).to(h.dtype))
        # the logits' gradient in the layer's dtype, as unfused (its float32 form lived only
        # per chunk); one matmul each for the input's and the weight's gradient, as unfused
        d = torch.cat(grads)
        ctx.save_for_backward(
            d @ weight if need[0] else None,
            d.t() @ h if need[1] else None,
            d.sum(0) if need[2] else None,
        )
        return (total * per).to(out_dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        scaled = tuple(None if g is None else g * grad for g in ctx.saved_tensors)
        return (*scaled, None, None, None, None, None, None, None, None, None)


class LogitsGrad(torch.autograd.Function):
    """The model's returned logits, computed in the compiled graph and returned detached, get
    their gradient here, outside it: ``g @ weight`` for the layer's input, ``g.T @ h`` for its
    weight, only when a loss of the user's reads them (autograd never calls it otherwise).
    Inside the graph every differentiable output gets a gradient, zeros when unused, and the
    fused loss would have paid two vocabulary-sized matmuls of zeros for it."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, h: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None, scale: float = 1.0) -> torch.Tensor:  # fmt: skip
        ctx.save_for_backward(h, weight)
        ctx.bias, ctx.scale = bias is not None, scale
        return logits.view_as(logits)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        h, weight = ctx.saved_tensors
        g = (grad.reshape(-1, grad.shape[-1]) * ctx.scale).to(weight.dtype)
        flat = h.reshape(-1, h.shape[-1])
        gh = (g @ weight).view(h.shape) if ctx.needs_input_grad[1] else None
        gw = g.t() @ flat if ctx.needs_input_grad[2] else None
        gb = g.sum(0) if ctx.bias and ctx.needs_input_grad[3] else None
        return None, gh, gw, gb, None


def linear_cross_entropy(*args: Any) -> torch.Tensor:
    """:class:`LinearCrossEntropy` as the graph calls it: a module-level function, which FX's
    code generation can name (torch 2.14 cannot name an ``autograd.Function``'s ``apply``)."""
    return LinearCrossEntropy.apply(*args)


def reattached(fn: Any, specs: list[dict], *args: Any) -> Any:
    """``fn(*args)`` (a compiled region) with :func:`reattach` applied to its outputs."""
    return reattach(fn(*args), args, specs)


def reattach(out: Any, args: Any, specs: list[dict]) -> Any:
    """The compiled graph's outputs as the user's model returns them: each fused loss's extra
    output (the layer's input) dropped, its logits given :class:`LogitsGrad`."""
    if not specs:
        return out
    got = list(out)
    extra = sorted((s["h_out"] for s in specs), reverse=True)
    hs = {i: got[i] for i in extra}
    for i in extra:
        del got[i]
    for s in specs:
        h, w = hs[s["h_out"]], args[s["weight_in"]]
        b = args[s["bias_in"]] if s["bias_in"] is not None else None
        if torch.is_grad_enabled() and (h.requires_grad or w.requires_grad):
            logits = LogitsGrad.apply(got[s["logits_out"]], h, w, b, s["scale"])
            for i in (s["logits_out"], *s["logits_also"]):
                got[i] = logits
    return type(out)(got) if isinstance(out, tuple) else got
