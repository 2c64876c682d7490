"""GPU memory memopt owns for the streamed layers: one allocation, fixed slots, typed views.

Every streamed layer always lands in the same slot at the same offsets, so a parameter's device
tensor is a fixed view into the arena for the whole run. That is what keeps
``torch.cuda.memory_reserved`` flat (one allocation, made once) and what makes saved tensors
correct: autograd (or a compiled graph) that saved a view of a weight reads the right bytes in
backward because the layer is reloaded into the same place before its backward runs.

Copies into the arena go through :attr:`SlotArena.raw`, an alias with its own version counter, so
reloading a slot does not look like an in-place edit of tensors autograd saved.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from memopt.params.placement import ALIGN, TensorSlice, slot_layout


class SlotArena:
    """``slots`` slots of ``slot_bytes`` bytes each in one uint8 tensor on ``device``."""

    def __init__(self, slots: int, slot_bytes: int, device: torch.device | str) -> None:
        if slot_bytes % ALIGN:
            raise ValueError(f"slot_bytes={slot_bytes} must be a multiple of {ALIGN}")
        self.slots = int(slots)
        self.slot_bytes = int(slot_bytes)
        self.device = torch.device(device)
        self.buffer = torch.empty(self.slots * self.slot_bytes, dtype=torch.uint8, device=device)
        # `.data` gives a new version counter: writes through `raw` leave the views' versions alone.
        self.raw = self.buffer.data

    @property
    def nbytes(self) -> int:
        return self.buffer.numel()

    def offset(self, slot: int, piece: TensorSlice) -> int:
        """Byte offset of ``piece`` of ``slot`` from the start of the arena."""
        if not 0 <= slot < self.slots:
            raise IndexError(f"slot {slot} out of range [0, {self.slots})")
        if piece.offset + piece.nbytes > self.slot_bytes:
            raise ValueError(f"{piece} does not fit a slot of {self.slot_bytes} bytes")
        return slot * self.slot_bytes + piece.offset

    def view(
        self, slot: int, piece: TensorSlice, dtype: torch.dtype, shape: Sequence[int]
    ) -> torch.Tensor:
        """A tensor of ``dtype`` and ``shape`` over ``piece`` of ``slot`` (shares the arena)."""
        return _typed_view(self.buffer, self.offset(slot, piece), piece.nbytes, dtype, shape)

    def raw_view(
        self, slot: int, piece: TensorSlice, dtype: torch.dtype, shape: Sequence[int]
    ) -> torch.Tensor:
        """Like :meth:`view`, through the alias whose writes bump no saved tensor's version."""
        return _typed_view(self.raw, self.offset(slot, piece), piece.nbytes, dtype, shape)


def _typed_view(
    buf: torch.Tensor, offset: int, nbytes: int, dtype: torch.dtype, shape: Sequence[int]
) -> torch.Tensor:
    item = torch.empty((), dtype=dtype).element_size()
    if offset % item:
        raise ValueError(f"offset {offset} is not aligned for {dtype}")
    return buf[offset : offset + nbytes].view(dtype).view(tuple(shape))


def layer_layout(params: Sequence[torch.Tensor]) -> tuple[list[TensorSlice], int]:
    """The slot layout of one layer's parameters (in the order given) and its aligned size."""
    return slot_layout([p.numel() * p.element_size() for p in params])
