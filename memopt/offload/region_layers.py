"""The user's ``offload_layers=k`` and sync dict count the model's layers; a compiled region that
holds a run of them (a graph break or a per-block compile split the stack into regions of several
layers each) offloads inside its own graph. This turns the model's numbering into the region's:
plain data, no FX.

A region holding the model's layers ``first .. first + n - 1`` of ``total``:

* ``offload_layers=k`` offloads the region's layers among the model's first ``k``, on the
  region's own default schedule (:func:`memopt.offload.sync.default_sync`); the region's last
  layer cannot be offloaded inside its graph (its backward is the graph's first), which is said.
* a sync point of the model's timeline maps to the region's: forward counts less ``first``,
  backward counts less the ``total - first - n`` layers whose backward runs before the region's;
  a point outside the region is moved to its nearest end, which is said.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memopt.offload.sync import SyncEntry, SyncError, build_schedule, default_sync


def layer_slice(names: Sequence[str], model_layers: Sequence[str]) -> tuple[int, int] | None:
    """``(first, total)``: where a region's layers ``names`` sit among the model's, when they are
    a run of fewer than all of them; None otherwise (the whole stack, or names not found)."""
    if not names or not model_layers or len(names) >= len(model_layers):
        return None
    where = {name: i for i, name in enumerate(model_layers)}
    idx = [where.get(name) for name in names]
    if idx[0] is None or idx != list(range(idx[0], idx[0] + len(idx))):
        return None
    return idx[0], len(model_layers)


def _span(first: int, n: int) -> str:
    return f"layer {first}" if n == 1 else f"layers {first}-{first + n - 1}"


def slice_schedule(
    first: int,
    total: int,
    n: int,
    offload_layers: int,
    sync: Mapping[int, SyncEntry] | None,
) -> tuple[dict[int, SyncEntry] | None, str | None]:
    """The region's sync dict for the user's setting (see the module docstring), and a note
    when it cannot apply as asked."""
    held = f"this compiled region holds the model's {_span(first, n)} of {total}"
    if sync:
        return _sync_here(first, total, n, sync, held)
    k = min(max(offload_layers - first, 0), n)
    if k == 0:
        return None, None  # the layers asked for are in other regions
    if k < n:
        return default_sync(n, k), None
    why = (
        f"offload_layers={offload_layers}: {held} (a graph break or a per-block compile split "
        "the model), and a region's last layer cannot be offloaded inside its graph (its "
        "backward comes first)"
    )
    if n == 1:
        return None, f"{why}; nothing offloaded here. Offload more layers to reach the next region."
    return default_sync(n, n - 1), f"{why}; {_span(first, n - 1)} offloaded here."


def _sync_here(
    first: int, total: int, n: int, sync: Mapping[int, SyncEntry], held: str
) -> tuple[dict[int, SyncEntry] | None, str | None]:
    after = total - first - n  # layers whose backward runs before this region's

    def local(forward: bool, count: int) -> int:
        c = count - (first if forward else after)
        return min(max(c, 0), n)

    out: dict[int, SyncEntry] = {}
    moved = []
    for layer, (f_off, c_off, f_rel, c_rel) in sorted(sync.items()):
        if not first <= layer < first + n:
            continue
        entry = (f_off, local(f_off, c_off), f_rel, local(f_rel, c_rel))
        if entry[1] != c_off - (first if f_off else after) or entry[3] != c_rel - (
            first if f_rel else after
        ):
            moved.append(layer)
        out[layer - first] = entry
    if not out:
        return None, None
    try:
        build_schedule(out, n)
    except SyncError as e:
        return None, f"sync: {held}, and its entries cannot be scheduled inside it ({e}); " + (
            "nothing offloaded here"
        )
    if moved:
        return out, (
            f"sync: {held}; the sync points of layer(s) {', '.join(map(str, moved))} lie in "
            "other regions and were moved to this region's nearest end"
        )
    return out, None
