"""The per-layer synchronization dict of activation offload, and its event schedule.

``sync = {i: (offload_fwd, offload_num, reload_fwd, reload_num)}``:

* layer ``i`` is offloaded iff it is a key;
* its offload must finish -- and its GPU memory is released -- at the sync point
  ``(offload_fwd, offload_num)``;
* its reload starts at the sync point ``(reload_fwd, reload_num)``.

A sync point ``(forward, c)`` is the moment when exactly ``c`` layers have begun that pass:
just before the ``c``-th layer (0-based, in execution order) of the forward (``forward=True``)
or of the backward pass (``forward=False``) begins. The forward runs layers ``0..n-1``, the
backward ``n-1..0``, so ``(True, c)`` is the start of layer ``c``'s forward and ``(False, c)``
the start of layer ``n-1-c``'s backward; ``c = n`` is the end of that pass.

All sync points lie on one timeline: ``(True, 0) < ... < (True, n) < (False, 0) < ... <
(False, n)``. This module is plain data: no FX, no tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memopt.errors import ConfigError

SyncEntry = tuple[bool, int, bool, int]
"""``(offload_fwd, offload_num, reload_fwd, reload_num)``."""


class SyncError(ConfigError):
    """A synchronization dict that cannot be scheduled (the message names the layer and why)."""


@dataclass(frozen=True, order=True)
class SyncPoint:
    """The moment when ``count`` layers have begun the forward (``forward``) or backward pass."""

    forward: bool
    count: int

    def order(self, num_layers: int) -> int:
        """Position on the step's timeline: forward points first, then backward points."""
        return self.count if self.forward else num_layers + 1 + self.count

    def layer(self, num_layers: int) -> int | None:
        """The layer that begins at this point (None at the end of a pass)."""
        if self.count >= num_layers:
            return None
        return self.count if self.forward else num_layers - 1 - self.count

    def describe(self, num_layers: int) -> str:
        layer = self.layer(num_layers)
        pass_name = "forward" if self.forward else "backward"
        if layer is None:
            return f"the end of the {pass_name}"
        return f"the start of layer {layer}'s {pass_name}"


@dataclass(frozen=True)
class LayerSync:
    """When one offloaded layer's copies finish and start."""

    layer: int
    offload_done: SyncPoint
    """The device-to-host copy must be finished here; the GPU memory is released here."""
    reload_start: SyncPoint
    """The host-to-device copy is issued here."""


@dataclass(frozen=True)
class Event:
    """One synchronization event of the schedule."""

    point: SyncPoint
    kind: str
    """``"offload_done"`` or ``"reload_start"``."""
    layer: int


@dataclass(frozen=True)
class Schedule:
    """A validated synchronization dict for a model of ``num_layers`` layers."""

    num_layers: int
    layers: tuple[LayerSync, ...]
    """One entry per offloaded layer, sorted by layer."""

    def get(self, layer: int) -> LayerSync | None:
        for s in self.layers:
            if s.layer == layer:
                return s
        return None

    def offloaded(self) -> tuple[int, ...]:
        return tuple(s.layer for s in self.layers)

    def first_use(self, layer: int) -> SyncPoint:
        """A layer's saved activations are first needed when its backward begins."""
        return SyncPoint(False, self.num_layers - 1 - layer)

    def reload_done(self, layer: int) -> SyncPoint:
        """Where the reload of ``layer`` is waited on: its first use, or the end of the
        forward when the reload starts in the forward."""
        s = self.get(layer)
        if s is not None and s.reload_start.forward:
            return SyncPoint(True, self.num_layers)
        return self.first_use(layer)

    def events(self) -> list[Event]:
        """All events in timeline order. At one point, offloads finish before reloads start;
        offloads in forward layer order, reloads in reverse layer order."""
        evs = []
        for s in self.layers:
            evs.append(Event(s.offload_done, "offload_done", s.layer))
            evs.append(Event(s.reload_start, "reload_start", s.layer))

        def key(e: Event) -> tuple[int, int, int]:
            if e.kind == "offload_done":
                return (e.point.order(self.num_layers), 0, e.layer)
            return (e.point.order(self.num_layers), 1, -e.layer)

        return sorted(evs, key=key)

    def as_dict(self) -> dict[int, SyncEntry]:
        return {
            s.layer: (
                s.offload_done.forward,
                s.offload_done.count,
                s.reload_start.forward,
                s.reload_start.count,
            )
            for s in self.layers
        }


def default_sync(num_layers: int, offload_layers: int) -> dict[int, SyncEntry]:
    """The default dict for offloading ``k = offload_layers`` of ``n = num_layers`` layers.

    Layers ``0..k-1`` are offloaded; the offload of layer ``i`` finishes before the forward of
    layer ``n-k+i``; its reload starts after the backward of layer ``n-k+i`` (when ``k-i``
    layers have begun their backward). At most ``n-k`` layers' activations are on the GPU
    at any layer boundary.
    """
    n, k = num_layers, offload_layers
    if not isinstance(n, int) or n < 1:
        raise SyncError(f"num_layers={n!r}: need at least one layer to offload from")
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise SyncError(f"offload_layers={k!r} must be an int >= 0")
    if k >= n:
        raise SyncError(
            f"offload_layers={k}: a model of {n} layers can offload at most {n - 1} "
            "(the last layer's activations are needed as soon as its forward ends)"
        )
    return {i: (True, n - k + i, False, k - i) for i in range(k)}


def build_schedule(sync: Mapping[int, SyncEntry], num_layers: int) -> Schedule:
    """Validate ``sync`` for a model of ``num_layers`` layers and return its schedule.

    Raises SyncError for an unknown layer, a malformed entry, an offload that can never
    finish (it must end after the layer's forward has begun and before its activations are
    needed), or a reload scheduled after the activations' first use or before the offload
    has finished.
    """
    n = num_layers
    if not isinstance(n, int) or n < 1:
        raise SyncError(f"num_layers={n!r}: the model has no detected layers to offload")
    out = []
    for layer, entry in sorted(sync.items(), key=lambda kv: kv[0]):
        _check_entry(layer, entry, n)
        of, on, rf, rn = entry
        s = LayerSync(layer, SyncPoint(of, on), SyncPoint(rf, rn))
        _check_order(s, n)
        out.append(s)
    return Schedule(n, tuple(out))


def _check_entry(layer: object, entry: object, n: int) -> None:
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise SyncError(f"sync: key {layer!r} is not a layer index")
    if not 0 <= layer < n:
        raise SyncError(f"sync: unknown layer {layer}; the model has {n} layers (0..{n - 1})")
    if not (isinstance(entry, tuple | list) and len(entry) == 4):
        raise SyncError(
            f"sync[{layer}]={entry!r}: expected (offload_fwd, offload_num, reload_fwd, reload_num)"
        )
    of, on, rf, rn = entry
    if not isinstance(of, bool) or not isinstance(rf, bool):
        raise SyncError(f"sync[{layer}]={entry!r}: offload_fwd and reload_fwd must be bools")
    for name, v in (("offload_num", on), ("reload_num", rn)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= n:
            raise SyncError(
                f"sync[{layer}]: {name}={v!r} must be an int in 0..{n} (layers begun so far)"
            )


def _check_order(s: LayerSync, n: int) -> None:
    i = s.layer
    produced = SyncPoint(True, i)
    first_use = SyncPoint(False, n - 1 - i)
    od, rs = s.offload_done, s.reload_start
    if od.order(n) <= produced.order(n):
        raise SyncError(
            f"sync[{i}]: the offload can never finish at {od.describe(n)}: layer {i}'s "
            f"activations only exist once its forward has begun; use offload_num >= {i + 1} "
            "with offload_fwd=True"
        )
    if od.order(n) > first_use.order(n):
        raise SyncError(
            f"sync[{i}]: the offload can never finish in time: {od.describe(n)} comes after "
            f"layer {i}'s backward has begun (its activations are needed then); use "
            f"offload_fwd=False with offload_num <= {n - 1 - i}, or offload_fwd=True"
        )
    if rs.order(n) > first_use.order(n):
        raise SyncError(
            f"sync[{i}]: the reload is scheduled after first use: it starts at "
            f"{rs.describe(n)}, but layer {i}'s activations are needed at the start of its "
            f"backward (reload_fwd=False, reload_num <= {n - 1 - i})"
        )
    if rs.order(n) < od.order(n):
        raise SyncError(
            f"sync[{i}]: the reload starts at {rs.describe(n)}, before the offload finishes "
            f"at {od.describe(n)}"
        )
