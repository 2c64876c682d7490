"""Which FSDP2 groups keep their parameter shards on the host.

Plain data in, plain data out: sizes are ints (bytes), no torch here. ``fully_shard`` takes one
offload policy per call, so the unit of placement is a group (one transformer layer, or the root
with the embeddings and head). :func:`plan_host_groups` picks the fewest groups whose bytes reach
``fraction`` of all parameter bytes: layers first, spread evenly over the depth (each host
layer's transfer overlaps the device-resident layers before it), the root group only when the
layers alone cannot reach the fraction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostPlan:
    """The decided host placement of FSDP2 groups (the root group last)."""

    names: tuple[str, ...]
    """Group names in forward order; the last is the root group (``""`` for the model)."""

    group_bytes: tuple[int, ...]
    """Parameter bytes of each group (all ranks together, the dtype before any cast)."""

    on_host: tuple[bool, ...]
    """Per group: True when its shards live on the host (``CPUOffloadPolicy``)."""

    fraction: float
    """The requested share of parameter bytes on the host."""

    @property
    def total_bytes(self) -> int:
        return sum(self.group_bytes)

    @property
    def host_bytes(self) -> int:
        return sum(b for b, h in zip(self.group_bytes, self.on_host) if h)

    @property
    def host_share(self) -> float:
        """The share of parameter bytes actually on the host (>= ``fraction``)."""
        return self.host_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def host_groups(self) -> tuple[str, ...]:
        return tuple(n for n, h in zip(self.names, self.on_host) if h)


def spread(n: int, k: int) -> list[int]:
    """``k`` of ``range(n)`` spread evenly, starting at 0."""
    if k <= 0:
        return []
    return sorted({min(n - 1, math.floor(i * n / k)) for i in range(k)})


def check_fraction(fraction: float) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValueError(f"param_offload={fraction!r} must be a number in [0, 1]")
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(
            f"param_offload={fraction!r} must be in [0, 1]: the share of parameter bytes whose "
            "FSDP2 shards live on the host"
        )
    return float(fraction)


def plan_host_groups(names: Sequence[str], group_bytes: Sequence[int], fraction: float) -> HostPlan:
    """The fewest groups on the host whose bytes are at least ``fraction`` of the total.

    ``names`` / ``group_bytes`` list the layer groups in forward order and the root group last.
    ``fraction == 0`` puts nothing on the host, ``fraction == 1`` everything.
    """
    f = check_fraction(fraction)
    sizes = [int(b) for b in group_bytes]
    if len(sizes) != len(names) or not sizes:
        raise ValueError("names and group_bytes must be non-empty and of equal length")
    total, layers = sum(sizes), len(sizes) - 1
    need = math.ceil(f * total - 1e-9 * total)

    def make(chosen: set[int]) -> HostPlan:
        on_host = tuple(i in chosen for i in range(len(sizes)))
        return HostPlan(tuple(names), tuple(sizes), on_host, f)

    if f == 0.0:
        return make(set())
    for with_root in (False, True):
        for k in range(1, layers + 1):
            chosen = set(spread(layers, k)) | ({layers} if with_root else set())
            if sum(sizes[i] for i in chosen) >= need:
                return make(chosen)
    return make(set(range(len(sizes))))
