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


# ---- sizing from measured rates (plain floats; the measurements come from the benchmarks) ----
#: Bytes of host memory an fp32 AdamW update moves per byte of fp32 parameter: it reads w, g,
#: m, v and writes w, m, v (28 B per 4-byte parameter).
ADAMW_TRAFFIC_PER_PARAM_BYTE = 7.0


def prefetch_depth(
    group_bytes: Sequence[int], pcie_Bps: float, group_compute_s: float, *, limit: int = 4
) -> int:
    """Groups to all-gather ahead so a host group's H2D copy hides under the compute of the
    groups before it: ``ceil(copy seconds / compute seconds per group)``, in ``[1, limit]``.

    ``group_bytes`` are the bytes each host group copies to the device per all-gather,
    ``pcie_Bps`` the measured pinned H2D rate, ``group_compute_s`` one group's forward time.
    """
    if pcie_Bps <= 0 or group_compute_s <= 0:
        raise ValueError("pcie_Bps and group_compute_s must be > 0")
    copy_s = max(group_bytes, default=0) / pcie_Bps
    return max(1, min(limit, math.ceil(copy_s / group_compute_s - 1e-9)))


def host_update_s(host_bytes: int, adam_Bps: float) -> float:
    """Seconds the CPU AdamW of ``host_bytes`` fp32 parameter bytes takes at ``adam_Bps`` bytes
    of state traffic per second (measured in place: ``param_peers.py`` reports it)."""
    return host_bytes * ADAMW_TRAFFIC_PER_PARAM_BYTE / adam_Bps


def transfer_s(
    host_bytes: float,
    h2d_Bps: float = math.inf,
    d2h_Bps: float = math.inf,
    *,
    gathers: int = 2,
) -> float:
    """Seconds of PCIe per step for ``host_bytes`` of host shards: each all-gathered ``gathers``
    times host to device (forward, and again in backward when resharded after forward), its
    gradient copied back once; the two directions run at the same time."""
    return max(gathers * host_bytes / h2d_Bps, host_bytes / d2h_Bps)


def free_host_share(
    total_bytes: int,
    device_step_s: float,
    adam_Bps: float,
    *,
    h2d_Bps: float = math.inf,
    d2h_Bps: float = math.inf,
    gathers: int = 2,
) -> float:
    """The share of parameter bytes whose CPU update and PCIe copies both fit inside
    ``device_step_s`` (overlapped with the step, so they cost no time); more than that makes the
    step CPU or PCIe bound. Without PCIe rates only the update counts."""
    if total_bytes <= 0:
        return 0.0
    fits = device_step_s * adam_Bps / ADAMW_TRAFFIC_PER_PARAM_BYTE
    per_byte = transfer_s(1.0, h2d_Bps, d2h_Bps, gathers=gathers)
    if per_byte > 0:
        fits = min(fits, device_step_s / per_byte)
    return min(1.0, fits / total_bytes)


def choose_host_fraction(
    need: float, total_bytes: int, device_step_s: float, adam_Bps: float, **pcie: float
) -> float:
    """The fraction to put on the host when the planner must move ``need`` of the bytes: at
    least ``need`` (memory decides), and up to :func:`free_host_share` (more GPU memory freed
    at no step time) when the CPU update and copies of that much still hide under the device
    step. ``pcie``: ``h2d_Bps``, ``d2h_Bps``, ``gathers`` as in :func:`free_host_share`."""
    return max(check_fraction(need), free_host_share(total_bytes, device_step_s, adam_Bps, **pcie))


def predicted_step_s(
    plan: HostPlan, device_step_s: float, adam_Bps: float, *, world: int = 1, **pcie: float
) -> float:
    """The overlapped step: the device step, the host groups' CPU update or their PCIe copies,
    whichever is longest (the update runs beside the backward and the next forward). Each of
    ``world`` ranks updates and copies its ``1/world`` of the bytes."""
    local = plan.host_bytes / world
    return max(device_step_s, host_update_s(local, adam_Bps), transfer_s(local, **pcie))


def share_for_budget(total_bytes: int, device_bytes: int) -> float:
    """The least share of ``total_bytes`` on the host that leaves at most ``device_bytes`` on
    the device (``param_offload="8GiB"``)."""
    if total_bytes <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - device_bytes / total_bytes))


def grow_host_plan(plan: HostPlan, fraction: float) -> HostPlan:
    """``plan`` with the fewest more groups on the host to reach ``fraction``: groups already
    there stay (moving one back would need the device memory it freed); the new layers are
    spread evenly over the device-resident ones, the root group comes last."""
    f = check_fraction(fraction)
    total = plan.total_bytes
    need = math.ceil(f * total - 1e-9 * total)
    host = {i for i, h in enumerate(plan.on_host) if h}
    have = sum(plan.group_bytes[i] for i in host)
    root = len(plan.names) - 1
    free = [i for i in range(root) if i not in host]

    def make(chosen: set[int]) -> HostPlan:
        on_host = tuple(i in chosen for i in range(len(plan.names)))
        return HostPlan(plan.names, plan.group_bytes, on_host, max(f, plan.fraction))

    if have >= need:
        return make(host)
    for with_root in (False, True) if root not in host else (False,):
        for k in range(1, len(free) + 1):
            add = {free[j] for j in spread(len(free), k)} | ({root} if with_root else set())
            if have + sum(plan.group_bytes[i] for i in add) >= need:
                return make(host | add)
    return make(set(range(len(plan.names))))


#: Share of a training step one layer group's forward takes (forward : backward = 1 : 2);
#: ``prefetch_depth`` uses it to turn a measured step into one group's forward seconds.
FORWARD_SHARE = 1.0 / 3.0


@dataclass(frozen=True)
class AutoChoice:
    """What ``param_offload="auto"`` (or a byte budget) chose and from which inputs."""

    need: float
    """Least host share memory asks for (0 for ``"auto"``, from the budget otherwise)."""
    device_step_s: float
    """The measured step without waits for the host (max over ranks)."""
    adam_Bps: float
    h2d_Bps: float
    d2h_Bps: float
    free_share: float
    """The share whose update and copies hide under ``device_step_s``."""
    fraction: float
    """``max(need, free_share)``: the share asked of :func:`grow_host_plan`."""
    host_share: float
    """The share the chosen groups reach (``>= fraction``, or the previous placement's)."""
    prefetch: int
    host_update_s: float
    transfer_s: float
    predicted_step_s: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def choose_placement(
    plan: HostPlan,
    need: float,
    device_step_s: float,
    *,
    adam_Bps: float,
    h2d_Bps: float = math.inf,
    d2h_Bps: float = math.inf,
    world: int = 1,
    gathers: int = 2,
) -> tuple[HostPlan, AutoChoice]:
    """The placement and prefetch depth from measured rates: :func:`choose_host_fraction` on
    this rank's ``1/world`` of the bytes, :func:`grow_host_plan` from ``plan`` (the groups
    already on the host), :func:`prefetch_depth` for the host layers' copies."""
    pcie = {"h2d_Bps": h2d_Bps, "d2h_Bps": d2h_Bps, "gathers": gathers}
    local_total = plan.total_bytes / world
    free = free_host_share(local_total, device_step_s, adam_Bps, **pcie)
    f = choose_host_fraction(need, local_total, device_step_s, adam_Bps, **pcie)
    new = grow_host_plan(plan, f)
    layers = len(new.names) - 1
    host_layers = [b / world for b, h in zip(new.group_bytes[:-1], new.on_host) if h]
    group_s = device_step_s * FORWARD_SHARE / max(1, layers)
    depth = prefetch_depth(host_layers, h2d_Bps, group_s) if group_s > 0 else 1
    local = new.host_bytes / world
    choice = AutoChoice(
        need=need,
        device_step_s=device_step_s,
        adam_Bps=adam_Bps,
        h2d_Bps=h2d_Bps,
        d2h_Bps=d2h_Bps,
        free_share=free,
        fraction=f,
        host_share=new.host_share,
        prefetch=depth,
        host_update_s=host_update_s(local, adam_Bps),
        transfer_s=transfer_s(local, h2d_Bps, d2h_Bps, gathers=gathers),
        predicted_step_s=predicted_step_s(new, device_step_s, adam_Bps, world=world, **pcie),
    )
    return new, choice
