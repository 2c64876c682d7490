"""Inductor's horizontal fusions that would lengthen lifetimes, refused (private API).

Inductor fuses two kernels that share no producer and consumer ("horizontal" fusion) when
they read common data and are at most 64 nodes apart. The fused kernel runs where the later
one ran, so every buffer the earlier one read last lives on until then. In a transformer
block's backward the two norms' weight-gradient reductions fuse this way: the post-attention
norm's inputs (the MLP's input gradients and the recomputed residual, three hidden-sized
tensors) then live across the whole attention backward. The planner's model runs each node
where the FX graph puts it, so Inductor's peak was above it: on the tests' 2-layer Llama at
budget 0.1 by 8.6% (the CPU, fp32; tests/test_fusion_guard.py).

:func:`lifetime_guard` installs a handler (Inductor's own hook for its heuristics,
``V.set_choices_handler``) that refuses such a fusion of kernels more than :data:`NEAR` apart
whenever it would lengthen a lifetime (:func:`extended_bytes`). What it costs is a few more
reads of the data the two kernels share (Inductor's ``shared_data_score``), against memory the
planner cannot see. Measured in docs/zoo.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import weakref
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("memopt")

#: per scheduler: buffer name -> the original order of its last reader (inf: a graph output)
_LAST_READS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

#: Fusions of nodes at most this far apart in Inductor's order (its measure: the span of
#: both) are left to Inductor. Nearer fusions of one kernel's parts (the SiLU backward's gate,
#: up and product gradients) save buffers as often as they cost any.
NEAR = 8


def _last_reads(scheduler: Any) -> dict[str, float]:
    got = _LAST_READS.get(scheduler)
    if got is not None:
        return got
    from torch._inductor.virtualized import V

    last: dict[str, float] = {}
    for node in scheduler.nodes:
        for n in node.get_nodes():
            for dep in n.read_writes.reads:
                last[dep.name] = max(last.get(dep.name, -1), n.min_order)
    for name in V.graph.get_output_names():
        last[name] = math.inf
    _LAST_READS[scheduler] = last
    return last


def _nbytes(name: str) -> int:
    """Bytes of a buffer or graph input at the compile's size hints (0: cannot tell)."""
    from torch._inductor.virtualized import V

    from memopt._torch_compat.inductor_plan import _nbytes as storage_bytes

    try:
        buf = V.graph.get_buffer(name)
    except Exception:  # noqa: BLE001 - an unknown name counts nothing
        return 0
    from torch._inductor import ir

    while isinstance(buf, (ir.TensorBox, ir.StorageBox)):
        buf = buf.data
    return (storage_bytes(buf) or 0) if buf is not None else 0


def _freed_here(name: str) -> bool:
    """Whether the graph frees ``name`` after its last read: its own buffers, and a
    backward's inputs other than the forward's inputs saved as they were (parameters, the
    batch: ``primals_*``), which something outside holds."""
    from torch._inductor.virtualized import V

    if name not in V.graph.graph_inputs:
        return True
    return bool(getattr(V.graph, "is_backward", False)) and not name.startswith("primals")


def extended_bytes(scheduler: Any, node1: Any, node2: Any) -> int:
    """Bytes whose lifetime fusing ``node1`` and ``node2`` would lengthen when other kernels
    run between them. The fused kernel runs once: either late, and what the earlier node
    reads last (the later one does not read it) is held until then; or early, with what the
    later one needs pulled ahead, and its outputs are made before the kernels between run.
    Both are counted (Inductor decides the place after fusing)."""
    if node1.max_order < node2.min_order:
        early, late = node1, node2
    elif node2.max_order < node1.min_order:
        early, late = node2, node1
    else:
        return 0
    if max(late.max_order, early.max_order) - min(early.min_order, late.min_order) <= NEAR:
        return 0  # near (Inductor's measure of distance): few kernels run between them
    last = _last_reads(scheduler)
    late_reads = {d.name for d in late.read_writes.reads}
    names = {d.name for d in early.read_writes.reads} - late_reads
    held = sum(
        _nbytes(n)
        for n in sorted(names)
        if last.get(n, math.inf) < late.min_order and _freed_here(n)
    )
    made = sum(_nbytes(d.name) for d in late.read_writes.writes)
    return held + made


def _guarded_class(base: type, refused: list[int]) -> type:
    class LifetimeGuard(base):  # type: ignore[misc, valid-type]
        @staticmethod
        def can_fuse_horizontal(scheduler, node1, node2, shared_data_score):  # noqa: ANN001
            if not base.can_fuse_horizontal(scheduler, node1, node2, shared_data_score):
                return False
            try:
                extra = extended_bytes(scheduler, node1, node2)
            except Exception as e:  # noqa: BLE001 - a heuristic must never break a compile
                log.debug("memopt: fusion guard skipped: %s", e)
                return True
            if extra:
                refused.append(extra)
            return not extra

    return LifetimeGuard


@contextlib.contextmanager
def lifetime_guard(enabled: bool = True) -> Iterator[list[int]]:
    """While active, Inductor refuses horizontal fusions of kernels more than :data:`NEAR`
    apart that would lengthen lifetimes (this thread; both graphs of a region compile in it).
    Yields the list the bytes of each refused fusion are appended to (a candidate pair can
    be asked about more than once). A torch without the hook
    (``InductorChoices.can_fuse_horizontal``) is left as it is."""
    refused: list[int] = []
    if not enabled:
        yield refused
        return
    try:
        from torch._inductor.choices import InductorChoices
        from torch._inductor.virtualized import V
    except ImportError:
        yield refused
        return
    if not hasattr(InductorChoices, "can_fuse_horizontal"):
        yield refused
        return
    prior = V.choices
    handler = _guarded_class(type(prior), refused)()
    handler.__dict__.update(getattr(prior, "__dict__", {}))
    with V.set_choices_handler(handler):
        yield refused
