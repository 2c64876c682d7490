"""Measure what a compiled step really saves for backward (used by tests, the demo and
benchmarks to check the report's estimates)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from memopt import _torch_compat as compat


def _storage_key(t: torch.Tensor) -> tuple[int, str]:
    st = t.untyped_storage()
    return st.data_ptr(), str(t.device)


@dataclass
class SavedTensor:
    """One storage saved for backward, as first seen."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]
    nbytes: int  # the whole storage
    compiled: bool  # saved by a compiled region (else by eager autograd between regions)


@dataclass
class SavedMeasurement:
    """What one forward saved for backward: unique storages, ``exclude`` left out."""

    tensors: list[SavedTensor] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def compiled(self) -> int:
        """Bytes saved by compiled regions (what memopt's report predicts)."""
        return sum(t.nbytes for t in self.tensors if t.compiled)

    @property
    def eager(self) -> int:
        """Bytes saved by eager code between graph breaks (no compiled graph sees them)."""
        return self.total - self.compiled


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def measure_saved(
    step: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()
) -> tuple[Any, SavedMeasurement]:
    """Run ``step()`` (a forward) under saved-tensor hooks; return its result and the unique
    storages saved for backward, ``exclude`` (parameters, buffers, inputs) left out, each
    marked compiled or eager."""
    skip = {_storage_key(t) for t in exclude if isinstance(t, torch.Tensor)}
    seen: list[SavedTensor] = []
    # the storage counted at each address. FSDP2 frees an unsharded parameter's memory
    # (``resize_(0)``) while autograd still holds it, and a later all-gather may get the same
    # address: a storage no longer at its address was freed, and the new one counts too
    at: dict[tuple[int, str], torch.UntypedStorage] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta":
            key = _storage_key(t)
            if key not in skip and key[0] != 0 and not (key in at and at[key].data_ptr() == key[0]):
                at[key] = t.untyped_storage()
                seen.append(
                    SavedTensor(
                        tuple(t.shape),
                        t.dtype,
                        tuple(t.stride()),
                        at[key].nbytes(),
                        compat.packing_in_compiled_region(),
                    )
                )
        return t

    # eager code between graph breaks runs these under Dynamo's frame callback: never traced
    # (else each call site compiles them into Dynamo's recompile limit, and warns)
    hooks = torch.compiler.disable(pack), torch.compiler.disable(_unpack)
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        out = step()
    return out, SavedMeasurement(seen)


def measure_saved_activation_bytes(
    step: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()
) -> tuple[Any, int]:
    """Run ``step()`` (a forward) under saved-tensor hooks; return (its result, the bytes of
    unique storages saved for backward, excluding ``exclude`` (parameters, inputs))."""
    out, m = measure_saved(step, exclude)
    return out, m.total
