"""The per-layer timeline of a synchronization schedule (the diagram of the OneTrainer docs).

One row per executed layer, forward (``->``) then backward (``<-``); one column per layer:

* ``■`` the layer is executing;
* ``X`` its saved activations are on the GPU (including a reload in flight);
* ``_`` they are on the CPU only;
* ``.`` it has none (not produced yet in the forward, or already consumed by its backward).

Each row shows the state while that layer executes, after the sync point at its start.
Beside the diagram: the bytes on the GPU and the bytes in flight (device-to-host copies
still running, host-to-device copies issued but not yet waited on). Plain data in, strings
and dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memopt.offload.sync import Schedule, SyncPoint

EXECUTING = "■"
ON_GPU = "X"
ON_CPU = "_"
ABSENT = "."
LEGEND = (
    f"{EXECUTING} executing   {ON_GPU} activations on the GPU   "
    f"{ON_CPU} activations on the CPU   {ABSENT} none (not produced yet / consumed)"
)


@dataclass(frozen=True)
class Row:
    """The state while one layer executes."""

    forward: bool
    layer: int
    cells: tuple[str, ...]
    on_gpu: int
    """Sum of the layer sizes marked ``■`` or ``X``."""
    d2h_in_flight: int
    """Sum of the sizes of offloads started (layer produced) and not yet finished."""
    h2d_in_flight: int
    """Sum of the sizes of reloads started and not yet waited on (first use not reached)."""


def timeline_rows(schedule: Schedule, layer_bytes: Mapping[int, int] | None = None) -> list[Row]:
    """The ``2n`` rows of the diagram. ``layer_bytes`` gives each layer's size (default 1)."""
    n = schedule.num_layers
    size = {i: 1 for i in range(n)} if layer_bytes is None else dict(layer_bytes)
    rows = []
    for forward in (True, False):
        for count in range(n):
            point = SyncPoint(forward, count)
            now = point.order(n)
            running = point.layer(n)
            assert running is not None
            cells, gpu, d2h, h2d = [], 0, 0, 0
            for i in range(n):
                produced = not forward or i <= running
                consumed = not forward and i > running
                s = schedule.get(i)
                offloaded = s is not None and s.offload_done.order(n) <= now
                reloaded = s is not None and s.reload_start.order(n) <= now
                if i == running:
                    cell = EXECUTING
                elif not produced or consumed:
                    cell = ABSENT
                elif offloaded and not reloaded:
                    cell = ON_CPU
                else:
                    cell = ON_GPU
                cells.append(cell)
                if cell in (EXECUTING, ON_GPU):
                    gpu += size.get(i, 0)
                if s is not None and produced and not offloaded:
                    d2h += size.get(i, 0)
                if s is not None and reloaded and now < schedule.reload_done(i).order(n):
                    h2d += size.get(i, 0)
            rows.append(Row(forward, running, tuple(cells), gpu, d2h, h2d))
    return rows


def render_diagram(schedule: Schedule) -> str:
    """The bare diagram: ``->  ■ . . . .  (forward pass starts)`` etc., one line per row."""
    lines = []
    rows = timeline_rows(schedule)
    for k, r in enumerate(rows):
        arrow = "->" if r.forward else "<-"
        line = f"{arrow}  {' '.join(r.cells)}"
        if k == 0:
            line += "  (forward pass starts)"
        elif r.forward is False and rows[k - 1].forward:
            line += "  (backward pass starts)"
        lines.append(line)
    return "\n".join(lines)


def render_timeline(schedule: Schedule, layer_bytes: Mapping[int, int] | None = None) -> str:
    """Diagram plus the bytes on the GPU and in flight at each step, with a legend."""
    rows = timeline_rows(schedule, layer_bytes)
    fmt = format_bytes if layer_bytes is not None else _format_layers
    n = schedule.num_layers
    width = max(len(" ".join(["X"] * n)), len("layers"))
    head = f"{'':2}  {'step':>4} {'layer':>5}  {'layers':<{width}}  {'on GPU':>10}  {'D2H in flight':>13}  {'H2D in flight':>13}"
    lines = [LEGEND, head]
    for k, r in enumerate(rows):
        arrow = "->" if r.forward else "<-"
        cells = " ".join(r.cells)
        lines.append(
            f"{arrow}  {k:>4} {r.layer:>5}  {cells:<{width}}  {fmt(r.on_gpu):>10}  "
            f"{fmt(r.d2h_in_flight):>13}  {fmt(r.h2d_in_flight):>13}"
        )
    peak = max((r.on_gpu for r in rows), default=0)
    lines.append(f"peak on GPU at a layer: {fmt(peak)}")
    return "\n".join(lines)


def timeline_dict(schedule: Schedule, layer_bytes: Mapping[int, int] | None = None) -> dict:
    """The timeline as JSON-ready data."""
    return {
        "num_layers": schedule.num_layers,
        "sync": {str(k): list(v) for k, v in schedule.as_dict().items()},
        "rows": [
            {
                "pass": "forward" if r.forward else "backward",
                "layer": r.layer,
                "cells": "".join(r.cells),
                "on_gpu": r.on_gpu,
                "d2h_in_flight": r.d2h_in_flight,
                "h2d_in_flight": r.h2d_in_flight,
            }
            for r in timeline_rows(schedule, layer_bytes)
        ],
    }


def format_bytes(n: int) -> str:
    """``0 B``, ``512 B``, ``1.50 KiB``, ``2.00 MiB``, ``3.00 GiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")


def _format_layers(n: int) -> str:
    return f"{n} layer" if n == 1 else f"{n} layers"
