"""Measure what a compiled step really saves for backward (used by tests, the demo and
benchmarks to check the report's estimates)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def _storage_key(t: torch.Tensor) -> tuple[int, str]:
    st = t.untyped_storage()
    return st.data_ptr(), str(t.device)


def measure_saved_activation_bytes(
    step: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()
) -> tuple[Any, int]:
    """Run ``step()`` (a forward) under saved-tensor hooks; return (its result, the bytes of
    unique storages saved for backward, excluding ``exclude`` (parameters, inputs))."""
    skip = {_storage_key(t) for t in exclude if isinstance(t, torch.Tensor)}
    seen: dict[tuple[int, str], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta":
            key = _storage_key(t)
            if key not in skip and key[0] != 0:
                seen[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step()
    return out, sum(seen.values())
