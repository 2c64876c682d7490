"""A linear layer and its cross-entropy fused: the loss and the gradients of the layer's input,
weight and bias are computed in the forward, so the backward holds neither the logits nor their
float32 softmax, only those gradients or, where smaller, the logits' gradient in the layer's
dtype (min-cut's choice; ``passes/fuse_loss.py`` puts the op in the graph under
``fuse_loss=True``; docs/fused_loss.md).

The forward's arithmetic is the unfused backward's: the logits cast to float32, their
log-sum-exp and ``softmax - one_hot(target)`` masked at ``ignore_index`` and scaled by the
reduction, cast to the layer's dtype, then the two matmuls of the linear layer's backward.
- Logits the graph returns (a transformers model's) are read whole and their gradient is made
  a vocabulary part at a time: each part's slice of the weight's gradient is its own matmul,
  the input's gradient is summed over parts inside ``addmm``; only one part of the logits'
  gradient is ever held beside the logits.
- Logits the graph does not return are computed a chunk of tokens at a time, and the logits'
  gradient is whole before the two matmuls over all tokens at once (a weight gradient summed
  over token chunks would read and write the whole weight once per chunk: 10 times 2.3 GB on
  Qwen2's head, +10 ms on an H100).

The backward scales the saved gradients by the loss's incoming gradient (a scalar), so a loss
divided or weighted afterwards (gradient accumulation, ``num_items_in_batch``) gets the same
gradients as unfused."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

#: fp32 logits per chunk the forward aims at (bytes); a chunk's softmax lives only inside it
CHUNK_BYTES = 256 << 20
#: at most this many chunks (each is unrolled in the compiled graph)
MAX_CHUNKS = 64


#: the logits' gradient per vocabulary part (bytes, in the layer's dtype) when the graph
#: returns the logits; at most :data:`MAX_PARTS` parts (each adds one rounding to the input's
#: gradient, summed over parts in the layer's dtype)
PART_BYTES = 128 << 20
MAX_PARTS = 8
#: vocabulary parts are multiples of this many classes (aligned matmul operands)
PART_ALIGN = 64


def chunk_count(tokens: int, vocab: int, chunk_bytes: int | None = None) -> int:
    """Chunks for ``tokens`` rows of ``vocab`` logits computed from the layer's input: about
    ``chunk_bytes`` (default :data:`CHUNK_BYTES`) of float32 each."""
    per = max(1, chunk_bytes if chunk_bytes is not None else CHUNK_BYTES)
    return max(1, min(MAX_CHUNKS, -(-tokens * vocab * 4 // per), tokens))


def part_count(tokens: int, vocab: int, itemsize: int) -> int:
    """Vocabulary parts for the gradient of ``tokens`` x ``vocab`` returned logits: about
    :data:`PART_BYTES` each in the layer's dtype; the count :func:`vocab_bounds` really
    makes."""
    asked = max(1, min(MAX_PARTS, -(-tokens * vocab * itemsize // max(1, PART_BYTES))))
    return len(vocab_bounds(vocab, asked))


def vocab_bounds(vocab: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` ranges of classes covering ``vocab``, each a multiple of :data:`PART_ALIGN`
    but the last (fewer where rounding up leaves nothing for the last ones)."""
    step = -(-vocab // max(1, parts))
    step = -(-step // PART_ALIGN) * PART_ALIGN
    return [(lo, min(vocab, lo + step)) for lo in range(0, vocab, step)]


@torch.library.custom_op("memopt::after", mutates_args=())
def after(x: torch.Tensor, deps: list[torch.Tensor]) -> torch.Tensor:
    """A copy of ``x`` (a small tensor) made once ``deps`` exist: an ordering point Inductor
    keeps, as it cannot fuse a kernel that reads the copy with one ``deps`` came from."""
    return x.clone()


@after.register_fake
def _after_fake(x: torch.Tensor, deps: list[torch.Tensor]) -> torch.Tensor:
    return torch.empty_like(x)


class LinearCrossEntropy(torch.autograd.Function):
    """``cross_entropy(linear(h, weight, bias), target)`` over 2-D ``h`` (tokens, hidden) and
    1-D ``target``; ``logits``: the layer's output when the graph computes it anyway (it is
    not computed again), else None. ``chunks``: token chunks of computed logits, or vocabulary
    parts (:func:`vocab_bounds`) of returned ones. ``need``: whether h, weight and bias need
    gradients.
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
        cap: tuple[float, float] | None = None,
    ) -> torch.Tensor:
        acc = torch.float32
        valid = target != ignore_index
        per = 1.0 / valid.sum().to(acc) if reduction == "mean" else h.new_ones((), dtype=acc)
        safe = torch.where(valid, target, 0)
        # through the logits' scale (Cohere, Granite) to the layer's output
        factor = per * scale

        def grad_of(x: torch.Tensor, lse: torch.Tensor, hit: torch.Tensor, vc: torch.Tensor):
            d = torch.exp(x - lse[:, None]) - hit.to(acc)
            if cap is not None:  # through a * tanh(b * y): a * b * (1 - tanh^2)
                t = x / cap[0]
                d = d * ((cap[0] * cap[1]) * (1.0 - t * t))
            return torch.where(vc[:, None], d * factor, 0.0).to(h.dtype)

        if logits is not None:
            # the model's logits, read whole; the logits' gradient a vocabulary part at a
            # time, each part's matmuls run before the next part is made
            lse = torch.logsumexp(logits.to(acc), dim=-1)
            picked = logits.gather(1, safe[:, None])[:, 0].to(acc)
            total = torch.where(valid, lse - picked, 0.0).sum()
            gh, gws, gbs, done = None, [], [], []
            for lo, hi in vocab_bounds(weight.shape[0], chunks):
                hit = torch.arange(lo, hi, device=h.device)[None, :] == safe[:, None]
                # each part's gradient made once the previous part's matmuls ran: Inductor
                # would fuse the parts' pointwise kernels (they read the same lse) into one,
                # and every part would be held at once
                at = after(lse, done) if done else lse
                d = grad_of(logits[:, lo:hi].to(acc), at, hit, valid)
                if need[0]:  # summed over parts in the matmul itself
                    w = weight[lo:hi]
                    gh = d @ w if gh is None else torch.addmm(gh, d, w)
                if need[1]:
                    gws.append(d.t() @ h)
                if need[2]:
                    gbs.append(d.sum(0))
                done = [t for t in (gh, *gws[-1:], *gbs[-1:]) if t is not None]
        else:
            classes = torch.arange(weight.shape[0], device=h.device)
            total = torch.zeros((), dtype=acc, device=h.device)
            grads = []

            def split(t: torch.Tensor | None) -> Any:
                return t.tensor_split(chunks) if t is not None else (None,) * chunks

            for hc, sc, vc in zip(split(h), split(safe), split(valid)):
                # a constant bias after the layer (final_logits_bias) added here
                lc = F.linear(hc, weight, bias)
                lc = lc if added is None else lc + added
                x = (lc if scale == 1.0 else lc * scale).to(acc)
                x = x if cap is None else cap[0] * torch.tanh(cap[1] * x)
                lse = torch.logsumexp(x, dim=-1)
                picked = x.gather(1, sc[:, None])[:, 0]
                total = total + torch.where(vc, lse - picked, 0.0).sum()
                grads.append(grad_of(x, lse, classes[None, :] == sc[:, None], vc))
            # the logits' gradient in the layer's dtype, as unfused (its float32 form lived
            # only per chunk); one matmul each for the input's and the weight's gradient
            d = torch.cat(grads)
            gh = d @ weight if need[0] else None
            gws = [d.t() @ h] if need[1] else []
            gbs = [d.sum(0)] if need[2] else []
        ctx.parts = len(gws)
        ctx.save_for_backward(gh, *gws, *gbs)
        return (total * per).to(out_dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        gh, *rest = ctx.saved_tensors
        gws, gbs = rest[: ctx.parts], rest[ctx.parts :]

        def joined(parts: list[torch.Tensor]) -> torch.Tensor | None:
            if not parts:
                return None
            return parts[0] * grad if len(parts) == 1 else torch.cat([p * grad for p in parts])

        gh = None if gh is None else gh * grad
        return (gh, joined(gws), joined(gbs), *(None,) * 10)


class LogitsGrad(torch.autograd.Function):
    """The model's returned logits, computed in the compiled graph and returned detached, get
    their gradient here, outside it: ``g @ weight`` for the layer's input, ``g.T @ h`` for its
    weight, only when a loss of the user's reads them (autograd never calls it otherwise).
    Inside the graph every differentiable output gets a gradient, zeros when unused, and the
    fused loss would have paid two vocabulary-sized matmuls of zeros for it. Soft-capped logits
    (``a * tanh(b * y)``) recompute ``y`` here to pass through the tanh: keeping the logits
    for it would hold them for the whole step.

    The layer's input (and bias) are held on ``ctx``, not saved for backward: they live
    exactly as long as the returned logits do (this node is theirs alone, in no loss's graph
    unless a loss reads them), a small part of the logits' own footprint (hidden / vocabulary
    of it), which a step that drops its outputs frees with them."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, h: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None, scale: float = 1.0,
                cap: tuple[float, float] | None = None) -> torch.Tensor:  # fmt: skip
        ctx.held = (h, weight, bias if cap is not None else None)
        ctx.bias, ctx.scale, ctx.cap = bias is not None, scale, cap
        return logits.view_as(logits)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        h, weight, bias = ctx.held
        flat = h.reshape(-1, h.shape[-1])
        g = grad.reshape(-1, grad.shape[-1]) * ctx.scale
        if ctx.cap is not None:
            a, b = ctx.cap
            t = torch.tanh(b * ctx.scale * F.linear(flat, weight, bias).float())
            g = g * (a * b) * (1.0 - t * t)
        g = g.to(weight.dtype)
        gh = (g @ weight).view(h.shape) if ctx.needs_input_grad[1] else None
        gw = g.t() @ flat if ctx.needs_input_grad[2] else None
        gb = g.sum(0) if ctx.bias and ctx.needs_input_grad[3] else None
        return None, gh, gw, gb, None, None


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
            logits = LogitsGrad.apply(got[s["logits_out"]], h, w, b, s["scale"], s.get("cap"))
            for i in (s["logits_out"], *s["logits_also"]):
                got[i] = logits
    return type(out)(got) if isinstance(out, tuple) else got
