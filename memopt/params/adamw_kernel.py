"""The host AdamW update: one pass over memory, bf16 write-back included.

    w, g, m, v (+ out) --one vectorized loop--> w', m', v' (+ out = bf16(w'))

torch's fused CPU AdamW (``torch._fused_adamw_``) needs the gradient in the parameter's dtype
and writes only the fp32 parameter: with bf16 shards and fp32 masters it takes three passes
(grad cast, update, bf16 cast). :func:`compiled_update` is that update written once in torch ops
and compiled by Inductor into one C++ loop (vectorized, OpenMP over ``torch.get_num_threads()``
threads), shape-dynamic, so a model compiles it once per (grad dtype, write-back) pair.
Hyperparameters travel in a small tensor so changing the learning rate never recompiles.
:func:`torch_update` is the fallback (no C++ compiler) and the reference in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from memopt._torch_compat import fused_adamw_


def check_adamw_args(lr, betas, eps, weight_decay, accumulation_steps) -> None:
    """torch.optim.AdamW's ranges, plus ``accumulation_steps >= 1`` (memopt's CPU AdamWs)."""
    if not 0.0 <= lr or not 0.0 <= eps or not 0.0 <= weight_decay:
        raise ValueError(f"invalid lr={lr}, eps={eps} or weight_decay={weight_decay}")
    if not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"betas={betas} must be in [0, 1)")
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")


@dataclass(frozen=True)
class AdamWStep:
    """One step's scalars for one parameter group."""

    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    step: int
    maximize: bool = False

    def tensor(self) -> torch.Tensor:
        """``[beta1, beta2, eps, 1 - lr * wd, lr / bc1, sqrt(bc2), sign]`` as float64 (the
        kernel computes in fp32 after reading them)."""
        bc1 = 1.0 - self.beta1**self.step
        bc2 = math.sqrt(1.0 - self.beta2**self.step)
        sign = -1.0 if self.maximize else 1.0
        vals = [self.beta1, self.beta2, self.eps, 1.0 - self.lr * self.weight_decay]
        return torch.tensor([*vals, self.lr / bc1, bc2, sign], dtype=torch.float32)


def _update(w, g, m, v, out, hp):
    b1, b2, eps, decay, step_size, bc2, sign = (hp[i] for i in range(7))
    g = g.float() * sign
    m2 = m + (g - m) * (1 - b1)
    v2 = v * b2 + g * g * (1 - b2)
    w2 = w * decay - step_size * m2 / (v2.sqrt() / bc2 + eps)
    m.copy_(m2)
    v.copy_(v2)
    w.copy_(w2)
    if out is not None:
        out.copy_(w2.to(out.dtype))


_COMPILED = None


def compiled_update(w, g, m, v, out, s: AdamWStep, scratch=None) -> None:
    """Update fp32 ``w``, ``m``, ``v`` in place from ``g`` (any float dtype); ``out`` (or None)
    receives ``w`` in its own dtype. All the same shape, contiguous, on the CPU."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(_update, dynamic=True, fullgraph=True)
    if w.numel():
        _COMPILED(w, g, m, v, out, s.tensor())


#: Elements per piece of :func:`torch_update` (it bounds the fp32 scratch to 64 MiB). Smaller
#: pieces would keep the three passes in cache, but on the H100 host (16 threads) whole tensors
#: measured faster than 1 Mi-element pieces (docs/benchmarks.md).
CHUNK = 1 << 24


def torch_update(w, g, m, v, out, s: AdamWStep, scratch: torch.Tensor | None = None) -> None:
    """The same update through torch's fused kernel: for a bf16 gradient or write-back, piece
    by piece (cast the piece's gradient into the reused ``scratch``, update, cast it out)."""
    n = w.numel()
    if not n:
        return
    kw = dict(
        lr=s.lr,
        beta1=s.beta1,
        beta2=s.beta2,
        weight_decay=s.weight_decay,
        eps=s.eps,
        maximize=s.maximize,
    )
    step = [torch.tensor(float(s.step))]
    if g.dtype == w.dtype and out is None:
        fused_adamw_([w], [g], [m], [v], step, **kw)
        return
    w1, g1, m1, v1 = w.view(-1), g.reshape(-1), m.view(-1), v.view(-1)
    o1 = out.view(-1) if out is not None else None
    if scratch is None or scratch.numel() < min(n, CHUNK):
        scratch = torch.empty(min(n, CHUNK), dtype=w.dtype)
    for a in range(0, n, CHUNK):
        b = min(n, a + CHUNK)
        gs = g1[a:b] if g.dtype == w.dtype else scratch[: b - a].copy_(g1[a:b])
        fused_adamw_([w1[a:b]], [gs], [m1[a:b]], [v1[a:b]], step, **kw)
        if o1 is not None:
            o1[a:b].copy_(w1[a:b])


def pick_update(kernel: str):
    """``"torch"`` (torch's fused kernel, in cache-sized pieces) or ``"compiled"`` (Inductor)."""
    if kernel not in ("compiled", "torch"):
        raise ValueError(f"kernel={kernel!r} must be 'torch' or 'compiled'")
    return compiled_update if kernel == "compiled" else torch_update
