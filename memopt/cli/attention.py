"""Plan for a GPU on a machine without one: the attention kernel a CUDA device would run.

``F.scaled_dot_product_attention`` picks its kernel by device. What the kernel saves for the
backward differs a lot (the math fallback saves the ``seq x seq`` attention matrix; the fused
kernels save the output and a log-sum-exp), so a CPU trace would mis-plan a GPU. While
:func:`emulate_cuda_attention` is active, the function is replaced by one that calls the
kernel a recent NVIDIA GPU picks with torch's default backend priority:

* flash attention for fp16/bf16 with no explicit mask and head dim <= 256 (multiple of 8);
* memory-efficient attention otherwise (explicit masks, fp32, GQA after repeating k/v);
* the original function (math) when neither applies (head dim > 256 in fp32, say).

Both fused kernels have meta implementations, so fake CPU tensors trace them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from memopt import _torch_compat as compat


def _repeat_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    if k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    return k, v


def cuda_choice(q: torch.Tensor, attn_mask: torch.Tensor | None) -> str:
    """``"flash"``, ``"efficient"`` or ``"math"``: the kernel an NVIDIA GPU would use."""
    d = q.shape[-1]
    if q.dim() != 4 or not isinstance(d, int):
        return "math"
    if q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None and d <= 256:
        if d % 8 == 0:
            return "flash"
    return "efficient" if d <= 512 else "math"


@contextlib.contextmanager
def emulate_cuda_attention() -> Iterator[None]:
    """Replace ``F.scaled_dot_product_attention`` by the CUDA kernel choice while active."""
    original = F.scaled_dot_product_attention
    kernels = compat.sdpa_kernels()

    def sdpa(
        query,
        key,
        value,
        attn_mask=None,
        dropout_p=0.0,
        is_causal=False,
        scale=None,
        enable_gqa=False,
    ):
        choice = cuda_choice(query, attn_mask)
        if choice == "math":
            return original(
                query,
                key,
                value,
                attn_mask=attn_mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )
        key, value = _repeat_kv(query, key, value)
        if choice == "flash":
            out = kernels["flash"](query, key, value, dropout_p, is_causal, False, scale=scale)
            return out[0]
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill(
                bias.logical_not(), float("-inf")
            )
        if bias is not None:
            bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        need_lse = query.requires_grad or key.requires_grad or value.requires_grad
        out = kernels["efficient"](
            query, key, value, bias, need_lse, dropout_p, is_causal, scale=scale
        )
        return out[0]

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
