"""Which layers stream between host and GPU, and where their GPU copies live.

Plain data in, plain data out: sizes are ints (bytes), no torch here. The streamer reads the
frozen :class:`LayerOffloadPlan`; it never decides.

Semantics of ``fraction`` (OneTrainer's "offloading fraction", by bytes, not layer count): the GPU
holds at most ``(1 - fraction) * T`` bytes of the layers' parameters at any time, where ``T`` is
the layers' total parameter bytes. GPU layer bytes are the resident layers plus a ring of
``slots`` equal-sized slots through which the streamed layers pass (fewer when fewer layers
stream). At least two layers are on the GPU at any time even when the budget is smaller (the ring
has two slots once two layers stream); the plan then reports the GPU bytes it actually needs
(``gpu_bytes`` > ``budget_bytes``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: GPU copies start on this boundary (bytes): enough for any dtype and for 128-bit vector loads.
ALIGN = 256


def align_up(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


@dataclass(frozen=True)
class TensorSlice:
    """Where one parameter lives inside a slot: ``[offset, offset + nbytes)``."""

    offset: int
    nbytes: int


@dataclass(frozen=True)
class LayerOffloadPlan:
    """The decided placement of the layers' parameters."""

    layer_bytes: tuple[int, ...]
    """Parameter bytes of each layer, in forward order."""

    streamed: tuple[bool, ...]
    """Per layer: True when its parameters live on the host and pass through the ring."""

    slot_of: tuple[int | None, ...]
    """Per layer: the ring slot its GPU copy always uses (None for resident layers)."""

    slots: int
    """Number of ring slots (current layer plus ``slots - 1`` prefetched ahead)."""

    slot_bytes: int
    """Bytes of one slot: the largest streamed layer's aligned layout."""

    budget_bytes: int
    """``(1 - fraction) * T`` rounded down: the requested cap on GPU layer bytes."""

    fraction: float

    @property
    def total_bytes(self) -> int:
        return sum(self.layer_bytes)

    @property
    def ring_bytes(self) -> int:
        return self.slots * self.slot_bytes if any(self.streamed) else 0

    @property
    def resident_bytes(self) -> int:
        return sum(b for b, s in zip(self.layer_bytes, self.streamed) if not s)

    @property
    def host_bytes(self) -> int:
        """Bytes of the streamed layers' host copies."""
        return sum(b for b, s in zip(self.layer_bytes, self.streamed) if s)

    @property
    def gpu_bytes(self) -> int:
        """GPU bytes of layer parameters at any time: resident layers plus the ring."""
        return self.resident_bytes + self.ring_bytes

    @property
    def streamed_layers(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.streamed) if s)


def slot_layout(nbytes: Sequence[int], align: int = ALIGN) -> tuple[list[TensorSlice], int]:
    """Pack tensors of ``nbytes`` one after another, each starting on ``align``.

    Returns the slices and the aligned total (the bytes a slot needs for this layer).
    """
    out, off = [], 0
    for n in nbytes:
        out.append(TensorSlice(off, int(n)))
        off = align_up(off + int(n), align)
    return out, off


def spread(n: int, k: int) -> list[int]:
    """``k`` of ``range(n)`` spread evenly, starting at 0 (streamed layers interleave residents,
    so each prefetch overlaps the compute of the resident layers before it)."""
    if k <= 0:
        return []
    return sorted({min(n - 1, math.floor(i * n / k)) for i in range(k)})


def plan_layer_offload(
    layer_bytes: Sequence[int],
    fraction: float,
    *,
    slots: int = 2,
    layer_slot_bytes: Sequence[int] | None = None,
) -> LayerOffloadPlan:
    """Choose the fewest streamed layers whose placement fits ``(1 - fraction)`` of the bytes.

    ``layer_bytes`` are the layers' parameter bytes; ``layer_slot_bytes`` the aligned bytes each
    needs in a slot (default: ``layer_bytes`` rounded up to :data:`ALIGN`). With ``fraction == 0``
    nothing streams. When even streaming every layer exceeds the budget (the budget is below
    ``slots`` layers), every layer streams and ``gpu_bytes`` is the ring alone.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValueError(f"param_offload={fraction!r} must be a number in [0, 1)")
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(
            f"param_offload={fraction!r} must be in [0, 1): it is the fraction of the layers' "
            "parameter bytes kept off the GPU, and at least two layers must stay resident"
        )
    if slots < 2:
        raise ValueError(f"slots={slots} must be >= 2 (the running layer plus one prefetched)")
    sizes = [int(b) for b in layer_bytes]
    if not sizes:
        raise ValueError("no layers to offload")
    need = [align_up(b) for b in sizes] if layer_slot_bytes is None else list(layer_slot_bytes)
    if len(need) != len(sizes):
        raise ValueError("layer_slot_bytes must have one entry per layer")
    total = sum(sizes)
    budget = math.floor((1.0 - float(fraction)) * total)
    n = len(sizes)

    def make(chosen: list[int]) -> LayerOffloadPlan:
        streamed = [i in chosen for i in range(n)]
        ring = min(slots, len(chosen)) if chosen else slots
        slot_of: list[int | None] = [None] * n
        for q, i in enumerate(chosen):
            slot_of[i] = q % ring
        slot_bytes = max((need[i] for i in chosen), default=0)
        return LayerOffloadPlan(
            layer_bytes=tuple(sizes),
            streamed=tuple(streamed),
            slot_of=tuple(slot_of),
            slots=ring,
            slot_bytes=slot_bytes,
            budget_bytes=budget,
            fraction=float(fraction),
        )

    if fraction == 0:
        return make([])
    for k in range(1, n + 1):
        plan = make(spread(n, k))
        if plan.gpu_bytes <= budget:
            return plan
    return make(list(range(n)))
