"""Activation offload across compiled regions: a layer compiled as its own region (FSDP2's
per-layer hooks, per-block ``torch.compile``) offloads what its forward saves and gets it back
for its backward, with the next layer's copy-back started one layer ahead.

No graph changes: the tensors a compiled region saves reach autograd through
``ctx.save_for_backward``, so saved-tensor hooks around the region's call see exactly them::

    run of layer l (forward)                    backward of layer l+1 begins
      pack(t)  -> handle(t)   (every save)        prefetch(l): H2D of l's host copies on the
      after the call: D2H of each handle on the    transfer stream into fresh device memory
      transfer stream into a pooled pinned        backward of layer l begins
      buffer; t.record_stream(transfer); t is      unpack(h): compute stream waits for the
      dropped (freed once its copy has run)        copy; returns the device tensor

Tensors that are inputs of the call (parameters, the layer's input), smaller than
``min_bytes`` or not dense are left in place. The copies go on the transfer stream and pinned
pool of :mod:`memopt.offload.ops`; on a CPU device the copies are synchronous (tests).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from memopt.offload import ops


@dataclass
class _Saved:
    """What autograd keeps for one saved tensor while its layer is offloaded."""

    t: torch.Tensor | None
    host: torch.Tensor | None = None
    device: torch.device | None = None
    done: object = None  # CUDA event: the D2H copy finished
    back: torch.Tensor | None = None  # the prefetched device copy
    back_done: object = None  # CUDA event: the H2D copy finished


@dataclass
class StepOffloadStats:
    offloaded_bytes: int = 0
    """Bytes copied to the host in the last complete step."""
    prefetched: int = 0
    """Tensors whose copy-back was started a layer ahead (last step)."""
    waited: int = 0
    """Tensors copied back only when their backward needed them (last step)."""
    per_run: dict[int, int] = field(default_factory=dict)
    """Bytes offloaded per run (position in the step)."""


class StepOffload:
    """The runtime of cross-region offload for one optimized model."""

    def __init__(self, positions: Sequence[int], min_bytes: int):
        self.positions = frozenset(positions)
        self.min_bytes = min_bytes
        self._groups: dict[int, list[_Saved]] = {}
        self._lock = threading.Lock()
        self.stats = StepOffloadStats()
        self._current = StepOffloadStats()

    def new_step(self) -> None:
        with self._lock:
            self.stats, self._current = self._current, StepOffloadStats()
            self._groups.clear()

    @contextlib.contextmanager
    def run(self, pos: int, inputs: Sequence[object]) -> Iterator[None]:
        """Around the forward call of the run at step position ``pos``."""
        if pos not in self.positions:
            yield
            return
        skip = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        group: list[_Saved] = []

        def pack(t: torch.Tensor) -> object:
            if (
                t.numel() * t.element_size() < self.min_bytes
                or t.untyped_storage().data_ptr() in skip
                or not ops.is_dense(t)
                or t.device.type == "meta"
            ):
                return t
            s = _Saved(t)
            group.append(s)
            return s

        with torch.autograd.graph.saved_tensors_hooks(pack, self._unpack):
            yield
        self._offload(pos, group)

    def _offload(self, pos: int, group: list[_Saved]) -> None:
        moved = 0
        for s in group:
            t = s.t
            s.device = t.device
            s.host = ops.POOL.acquire_like(
                tuple(t.shape), tuple(t.stride()), t.dtype, pinned=t.is_cuda
            )
            if t.is_cuda:
                s.done = ops._issue_on_transfer_stream(t.device, s.host, t)
                t.record_stream(ops.transfer_stream(t.device))  # freed after the copy ran
            else:
                s.host.copy_(t)
            ops._count("d2h", t.numel() * t.element_size(), t.device, t.is_cuda)
            moved += t.numel() * t.element_size()
            s.t = None
        with self._lock:
            self._groups[pos] = group
            self._current.offloaded_bytes += moved
            self._current.per_run[pos] = moved

    def backward_reached(self, pos: int) -> None:
        """Backward of the run at ``pos`` begins: start copying back the nearest earlier
        offloaded run (its backward comes next)."""
        with self._lock:
            earlier = [p for p in self._groups if p < pos]
            group = self._groups.pop(max(earlier), []) if earlier else []
        for s in group:
            if s.host is not None and s.back is None:
                s.back, s.back_done = _copy_back(s)
                self._current.prefetched += 1

    def _unpack(self, s: object) -> torch.Tensor:
        if isinstance(s, torch.Tensor):
            return s
        if s.t is not None:  # the forward call has not finished (recomputation inside it)
            return s.t
        if s.back is None:
            s.back, s.back_done = _copy_back(s)
            self._current.waited += 1
        if s.back_done is not None:
            torch.cuda.current_stream(s.device).wait_event(s.back_done)
        # the host copy stays with the handle: a second backward (retain_graph) reads it again
        out, s.back, s.back_done = s.back, None, None
        return out


def _copy_back(s: _Saved) -> tuple[torch.Tensor, object]:
    out = torch.empty_strided(s.host.shape, s.host.stride(), dtype=s.host.dtype, device=s.device)
    nbytes = s.host.numel() * s.host.element_size()
    if out.is_cuda:
        done = ops._issue_on_transfer_stream(s.device, out, s.host)
    else:
        out.copy_(s.host)
        done = None
    ops._count("h2d", nbytes, s.device, out.is_cuda)
    return out, done
