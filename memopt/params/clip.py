"""Global-norm gradient clipping over sharded gradients on the host and on the device.

Each rank takes the norm of its local shards (per device, then combined on the mesh's device),
one all-reduce over the shard group (sum of ``norm ** p``, or max for ``inf``) gives the global
norm, and every local shard is scaled by ``min(1, max_norm / (norm + 1e-6))`` -- the numbers
``torch.nn.utils.clip_grad_norm_`` computes on the unsharded gradients. Host tensors of the
2-norm may go to the C pass of :func:`memopt.params.adamw_native.sumsq` (one read, summed in
double: within an fp32 rounding of torch's fp32 norm).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from memopt.params._fsdp_compat import is_dtensor, local


def _reduce_group(grads: Sequence[torch.Tensor]):
    """The process group and device of the first DTensor's (1-D) mesh, else ``(None, cpu)``."""
    for g in grads:
        if is_dtensor(g):
            mesh = g.device_mesh
            if mesh.ndim != 1:
                raise NotImplementedError("clipping over an n-D mesh: use clip_grad_norm_")
            dev = torch.device(mesh.device_type)
            if dev.type == "cuda":
                dev = torch.device("cuda", torch.cuda.current_device())
            return mesh.get_group(), dev
    return None, torch.device("cpu")


def total_norm(
    grads: Sequence[torch.Tensor],
    norm_type: float = 2.0,
    mesh_from=None,
    host: Sequence[torch.Tensor] = (),
    threads: int = 0,
) -> torch.Tensor:
    """The global ``norm_type`` norm of ``grads`` and ``host`` (local shards reduced over the
    mesh of the first DTensor in ``mesh_from``, default ``grads``). ``threads`` > 0: the 2-norm
    of ``host`` (contiguous fp32/bf16 CPU tensors) by the C pass with that many threads."""
    p = float(norm_type)
    group, dev = _reduce_group(grads if mesh_from is None else mesh_from)
    parts = []
    if host and threads > 0 and p == 2.0:
        from memopt.params.adamw_native import sumsq

        parts.append(torch.tensor(sumsq(host, threads), dtype=torch.float32).to(dev))
    else:
        grads = [*grads, *host]
    for t in (local(g) for g in grads):
        if t.numel():
            n = torch.linalg.vector_norm(t, p, dtype=torch.float32)
            parts.append((n if math.isinf(p) else n**p).to(dev))
    acc = torch.zeros((), device=dev)
    if parts:
        stacked = torch.stack(parts)
        acc = stacked.max() if math.isinf(p) else stacked.sum()
    if group is not None and dist.get_world_size(group) > 1:
        op = dist.ReduceOp.MAX if math.isinf(p) else dist.ReduceOp.SUM
        dist.all_reduce(acc, op=op, group=group)
    return acc if math.isinf(p) else acc ** (1.0 / p)


def clip_coef(norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``min(1, max_norm / (norm + 1e-6))``, torch's ``clip_grad_norm_`` factor (fp32)."""
    return torch.clamp(float(max_norm) / (norm + 1e-6), max=1.0)
