"""Host groups' shards copied to the device ahead of use when FSDP2 runs at world size 1.

At world size 1 FSDP2 skips the all-gather: ``FSDPParamGroup.wait_for_unshard`` copies each host
shard to the device on the current stream at the moment its group is needed (torch 2.11-2.14),
so every host group's copy stalls the compute stream and FSDP2's prefetch lists (which start
all-gathers early) have nothing to start. Measured on the 1.03 B Llama at
``param_offload=0.5`` (H100, torch 2.11): 83 ms per step of host-to-device copies on the
compute stream (docs/benchmarks.md, sixteenth session).

:class:`HostPrefetch` stages the next ``depth`` host groups, in the order the last pass of the
same phase (forward or backward) unsharded them, on a side stream while the current group
computes, and lets FSDP2's own unshard read the staged device copies
(:func:`memopt.params._fsdp_compat.staged_shards`). A staged copy serves only the pass it was
made in: the host update of a group runs between its backward and the next forward, so a copy
left over from one pass is dropped at the next. Before a group is staged in the forward, its
pending host updates are waited for (``ready``), as the forward pre-hook of
:class:`memopt.params.HostAdamW` does.

Opt-in (``shard_with_offload(..., stage_ahead=True)``): on the benchmark's launch-bound steps
it moved the copies off the compute stream but not the step time beyond run-to-run noise, and
it holds up to ``depth`` groups' shards on the device (docs/params.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from memopt.params import _fsdp_compat as fc


class HostPrefetch:
    """Stage host groups' shards ``depth`` groups ahead; see the module docstring.

    ``groups``: the ``fully_shard``-ed modules to watch. What is staged follows the order in
    which groups unsharded in the last pass of the same phase (the first forward and the first
    backward stage nothing). ``ready(module)`` blocks until the module's host updates have run.
    """

    def __init__(
        self,
        groups: Sequence[nn.Module],
        depth: int = 1,
        ready: Callable[[nn.Module], None] | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth {depth} must be >= 1")
        self.order = [m for m in groups if fc.is_fsdp(m) and fc.param_group(m) is not None]
        self.depth = depth
        self.ready = ready
        self.stream = torch.cuda.Stream()
        self._staged: dict[int, tuple[torch.cuda.Event, list[torch.Tensor]]] = {}
        self._phase: str | None = None
        self._seen: list[nn.Module] = []
        self._order: dict[str, list[nn.Module]] = {}
        """Per phase, the groups that unsharded in its last pass, in order: what is staged
        (the root, unsharded through the backward, is never staged there)."""
        self.hits = 0
        """Unshards served from a staged copy."""
        self.dropped = 0
        """Staged copies never used (their group did not unshard in that pass)."""
        self.staged_bytes = 0
        self.peak_staged_bytes = 0
        """Device bytes held by staged copies at most (beside what FSDP2 holds)."""
        for m in self.order:
            fc.wrap_wait_for_unshard(m, self._wait_for_unshard)

    def _wait_for_unshard(self, module: nn.Module, original: Callable[[], None]) -> None:
        phase = fc.training_phase(module)
        if phase is None or not fc.world_size_one(module):
            original()
            return
        if phase != self._phase:  # a new pass: what the last one staged is stale
            if self._phase is not None and self._seen:
                self._order[self._phase] = self._seen
            self._phase, self._seen = phase, []
            self._drop_all()
        pending = fc.unshard_pending(module)
        if pending:
            self._seen.append(module)
        staged = self._staged.pop(id(module), None)
        stream = torch.cuda.current_stream()
        if staged is not None and pending and fc.group_on_host(module):
            event, bufs = staged
            stream.wait_event(event)
            with fc.staged_shards(module, bufs):
                original()
            self._release(bufs, stream)
            self.hits += 1
        else:
            if staged is not None:
                self._release(staged[1], stream)
                self.dropped += 1
            original()
        self._stage_after(module, phase)

    def _stage_after(self, module: nn.Module, phase: str) -> None:
        order = self._order.get(phase, [])
        if module not in order:
            return
        i = order.index(module)
        ahead = [m for m in order[i + 1 :] if fc.group_on_host(m)][: self.depth]
        for m in ahead:
            if id(m) not in self._staged:
                self._stage(m, phase)

    def _stage(self, module: nn.Module, phase: str) -> None:
        if phase == "forward" and self.ready is not None:
            self.ready(module)
        shards = fc.host_shards(module)
        device = torch.device("cuda", torch.cuda.current_device())
        with torch.cuda.stream(self.stream):
            bufs = [s.to(device, non_blocking=True) for s in shards]
            event = torch.cuda.Event()
            event.record(self.stream)
        self._staged[id(module)] = (event, bufs)
        self.staged_bytes += sum(b.numel() * b.element_size() for b in bufs)
        self.peak_staged_bytes = max(self.peak_staged_bytes, self.staged_bytes)

    def _release(self, bufs: list[torch.Tensor], stream: torch.cuda.Stream) -> None:
        for b in bufs:  # allocated on the side stream, read on ``stream``
            b.record_stream(stream)
        self.staged_bytes -= sum(b.numel() * b.element_size() for b in bufs)

    def _drop_all(self) -> None:
        stream = torch.cuda.current_stream()
        for _, bufs in self._staged.values():
            self._release(bufs, stream)
            self.dropped += 1
        self._staged.clear()

    def stats(self) -> dict:
        return {
            "depth": self.depth,
            "hits": self.hits,
            "dropped": self.dropped,
            "peak_staged_bytes": self.peak_staged_bytes,
        }
