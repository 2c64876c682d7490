"""The host AdamW update's scalars and its two kernels.

    w, g, m, v (+ out) --one loop--> w', m', v' (+ out = bf16(w'))

:mod:`memopt.params.adamw_native` is the loop in C (one pass, 28 B/element with the bf16
write-back). :func:`torch_update` is the same update through torch's fused CPU kernel
(``torch._fused_adamw_``), which needs the gradient in the parameter's dtype and writes only the
parameter: with bf16 shards and fp32 masters it takes three passes (gradient cast, update, bf16
cast-out). It is the fallback where no C compiler is found, and the reference in tests.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from memopt._torch_compat import fused_adamw_


def check_adamw_args(lr, betas, eps, weight_decay, accumulation_steps) -> None:
    """torch.optim.AdamW's ranges, plus ``accumulation_steps >= 1`` (memopt's HostAdamW)."""
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
    #: clipping's factor (an fp32 value), applied to the gradient inside the update: the
    #: update sees fl(g * grad_scale), what it would see had the gradient been scaled first
    grad_scale: float = 1.0

    def tensor(self) -> torch.Tensor:
        """``[1 - beta1, beta2, 1 - beta2, eps, 1 - lr * wd, -lr / bc1, sqrt(bc2), sign]``: each
        computed in double and rounded to fp32 once, as torch's fused kernel does; ``sign`` is
        -1 or 1 (``maximize``) times ``grad_scale`` (exact: one fp32 multiply in the loop)."""
        bc1 = 1.0 - self.beta1**self.step
        bc2 = math.sqrt(1.0 - self.beta2**self.step)
        sign = (-1.0 if self.maximize else 1.0) * self.grad_scale
        vals = [1.0 - self.beta1, self.beta2, 1.0 - self.beta2, self.eps]
        vals += [1.0 - self.lr * self.weight_decay, -(self.lr / bc1), bc2, sign]
        return torch.tensor(vals, dtype=torch.float32)


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
    coef = torch.tensor(s.grad_scale, dtype=torch.float32) if s.grad_scale != 1.0 else None
    if g.dtype == w.dtype and out is None:
        fused_adamw_([w], [g if coef is None else g * coef], [m], [v], step, **kw)
        return
    w1, g1, m1, v1 = w.view(-1), g.reshape(-1), m.view(-1), v.view(-1)
    o1 = out.view(-1) if out is not None else None
    if scratch is None or scratch.numel() < min(n, CHUNK):
        scratch = torch.empty(min(n, CHUNK), dtype=w.dtype)
    for a in range(0, n, CHUNK):
        b = min(n, a + CHUNK)
        gs = g1[a:b] if g.dtype == w.dtype and coef is None else scratch[: b - a].copy_(g1[a:b])
        if coef is not None:
            gs.mul_(coef)
        fused_adamw_([w1[a:b]], [gs], [m1[a:b]], [v1[a:b]], step, **kw)
        if o1 is not None:
            o1[a:b].copy_(w1[a:b])


def device_update(params: list, group: dict, state) -> None:
    """torch's fused AdamW over ``params`` (FSDP2 shards on the device: their local tensors),
    with ``group``'s hyperparameters and the per-parameter ``state`` (its step moved to the
    shard's device)."""
    from memopt.params._fsdp_compat import local

    if not params:
        return
    b1, b2 = group["betas"]
    steps = []
    for p in params:
        st = state[p]
        if st["step"].device != local(p).device:
            st["step"] = st["step"].to(local(p).device, torch.float32)
        steps.append(st["step"])
    torch._foreach_add_(steps, 1)
    fused_adamw_(
        [local(p).detach() for p in params],
        [local(p.grad) for p in params],
        [local(state[p]["exp_avg"]) for p in params],
        [local(state[p]["exp_avg_sq"]) for p in params],
        steps,
        lr=float(group["lr"]),
        beta1=float(b1),
        beta2=float(b2),
        weight_decay=float(group["weight_decay"]),
        eps=float(group["eps"]),
        maximize=bool(group["maximize"]),
    )


KERNELS = ("auto", "native", "torch")


def pick_kernel(kernel: str) -> str:
    """``"native"`` (the C loop; :class:`~memopt.params.adamw_native.NativeKernelError` where
    it cannot be built), ``"torch"`` (torch's fused kernel), or ``"auto"``: native where it
    builds, else torch with a warning that says why."""
    from memopt.params import adamw_native

    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r} must be one of {', '.join(map(repr, KERNELS))}")
    if kernel == "torch":
        return kernel
    try:
        adamw_native.load()
    except adamw_native.NativeKernelError as e:
        if kernel == "native":
            raise
        warnings.warn(
            f"memopt HostAdamW: the native AdamW loop is not available here ({e}); using "
            "torch's fused CPU kernel (bf16 host shards then take three passes over memory)",
            stacklevel=3,
        )
        return "torch"
    return "native"


def step_scalars(group: dict, step: int, grad_scale: float = 1.0) -> AdamWStep:
    """``group``'s hyperparameters at update ``step`` (``grad_scale``: clipping's factor)."""
    b1, b2 = group["betas"]
    return AdamWStep(
        lr=float(group["lr"]),
        beta1=float(b1),
        beta2=float(b2),
        eps=float(group["eps"]),
        weight_decay=float(group["weight_decay"]),
        step=step,
        maximize=bool(group["maximize"]),
        grad_scale=grad_scale,
    )
