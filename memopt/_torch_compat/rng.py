"""Random ops and the RNG state the partitioner saves for a recomputed one (private torch
APIs, as the rest of memopt._torch_compat)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


def random_targets() -> frozenset:
    """Ops whose recomputation would draw new random numbers."""
    names = ("inductor_random", "inductor_randint", "inductor_seeds", "inductor_lookup_seed")
    ops = (getattr(torch.ops.prims, name, None) for name in names)
    return frozenset(op.default for op in ops if op is not None)


def is_random_op(target: Any) -> bool:
    tags = getattr(target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags or target in random_targets()


def recompute_saves_rng_state(node: Any) -> bool:
    """Whether the partitioner saves an RNG state in the forward for ``node`` when it is
    recomputed: an op tagged ``nondeterministic_seeded``; from torch 2.14 not an SDPA kernel
    whose ``dropout_p`` is statically 0 (``partitioners.is_rng_op``; before, every tagged
    op, an SDPA without dropout included)."""
    from torch._functorch import partitioners

    rule = getattr(partitioners, "is_rng_op", None)
    if rule is not None:
        return bool(rule(node))
    return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


#: Whether a trace on fake CPU tensors plans for CUDA (``memopt plan --device-kind cuda``
#: without CUDA: memopt.cli.trace).
_PLANNING_FOR_CUDA = [False]
#: ``torch.cuda.get_rng_state()``'s bytes: the Philox seed and offset (CUDAGeneratorImpl).
CUDA_RNG_STATE_BYTES = 16


@contextlib.contextmanager
def planning_for_cuda() -> Iterator[None]:
    """Size the RNG state a recomputed seeded op saves as on CUDA (a trace on fake CPU tensors
    planning for a GPU: the CPU generator's 5,056 B state would be charged where a CUDA graph
    saves none)."""
    before, _PLANNING_FOR_CUDA[0] = _PLANNING_FOR_CUDA[0], True
    try:
        yield
    finally:
        _PLANNING_FOR_CUDA[0] = before


def seeded_recompute_state_bytes(device: torch.device) -> int:
    """Bytes the partitioner saves per recomputed seeded op (SDPA) on ``device``: its RNG
    state, or none; as on CUDA under :func:`planning_for_cuda`."""
    if device.type == "cuda" or _PLANNING_FOR_CUDA[0]:
        if torch._functorch.config.graphsafe_rng_functionalization:
            return 0
        if device.type != "cuda":
            return CUDA_RNG_STATE_BYTES
    mod = torch if device.type == "cpu" else torch.get_device_module(device.type)
    return mod.get_rng_state().numel()
