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

A run's backward point (:meth:`StepOffload.backward_reached`) is taken in a hook on its
output's autograd node (``memopt.regions``), which runs after the hooks on the output tensors:
FSDP2's pre-backward queues its all-gather copy-out, small host-to-device copies included, on
the compute stream there, and a copy-back queued before it would hold the copy engine while the
compute stream waits (measured at world size 2: docs/benchmarks.md).

Tensors that are inputs of the call (parameters, the layer's input), smaller than
``min_bytes`` or not dense are left in place. The copies go on the transfer stream and pinned
pool of :mod:`memopt.offload.ops`; on a CPU device the copies are synchronous (tests).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import torch

from memopt import _torch_compat as compat
from memopt.offload import ops
from memopt.offload.sync import SyncEntry, SyncPoint, build_schedule
from memopt.step_layers import reload_schedule

if TYPE_CHECKING:
    from memopt.config import MemoptConfig

log = logging.getLogger("memopt")

__all__ = ["StepOffload", "reload_schedule", "sync_schedule"]


@dataclass
class _Saved:
    """What autograd keeps for one saved tensor while its layer is offloaded."""

    t: torch.Tensor | None
    host: torch.Tensor | None = None
    device: torch.device | None = None
    back: torch.Tensor | None = None  # the prefetched device copy
    back_done: object = None  # CUDA event: the H2D copy finished
    used: bool = False  # the backward has read it (a share still due must not copy it again)


@dataclass
class StepOffloadStats:
    offloaded_bytes: int = 0
    """Bytes copied to the host in the last complete step."""
    prefetched: int = 0
    """Tensors whose copy-back was started a layer ahead (last step)."""
    skipped: int = 0
    """Runs not offloaded because other saved-tensor hooks were active (checkpointing)."""
    steps: int = 0
    """Steps finished under this offload plan (0: the numbers above are not measured yet)."""


Point = tuple[bool, int]
"""A moment of the step: ``(True, p)`` the forward of run ``p`` begins, ``(False, p)`` its
backward begins."""


class StepOffload:
    """The runtime of cross-region offload for one optimized model.

    ``reload_at``: point (or run, meaning its backward) -> the offloaded runs whose copy-back
    starts there (default: each run's as the next run's backward begins). ``release_at``: point
    -> offloaded runs whose device memory is released there: the compute stream waits for
    their copies, then drops them (a sync dict's ``offload_done``); runs not named are
    released as soon as their copy has run."""

    def __init__(
        self,
        positions: Sequence[int],
        min_bytes: int,
        reload_at: Mapping[int | Point, Sequence[int]] | None = None,
        release_at: Mapping[Point, Sequence[int]] | None = None,
    ):
        self.positions = frozenset(positions)
        self.min_bytes = min_bytes
        reload_at = reload_at or {p + 1: (p,) for p in self.positions}
        self.reload_at: dict[Point, tuple[int, ...]] = {
            (k if isinstance(k, tuple) else (False, k)): tuple(v) for k, v in reload_at.items()
        }
        self.release_at = {k: tuple(v) for k, v in (release_at or {}).items()}
        self._held = frozenset(p for v in self.release_at.values() for p in v)
        self._d2h: dict[int, object] = {}  # held run -> the event its copies finish at
        # copy-backs started in the backward are spread over the runs' backward starts up to
        # the first use (paced): run whose backward start issues them -> the tensors
        self._later: dict[int, list[_Saved]] = {}
        self._groups: dict[int, list[_Saved]] = {}
        self._lock = threading.Lock()
        self.stats = StepOffloadStats()
        self._current = StepOffloadStats()

    def new_step(self) -> None:
        with self._lock:
            done = self.stats.steps + 1
            self.stats, self._current = replace(self._current, steps=done), StepOffloadStats()
            self._groups.clear()
            self._d2h.clear()
            self._later.clear()

    def counts(self, under_way: bool) -> StepOffloadStats:
        """The step under way's counts (a report read after a step's backward reads that
        step, not the one before it: sweep 8, MusicGen), else the last finished step's."""
        with self._lock:
            return replace(self._current, steps=self.stats.steps + 1) if under_way else self.stats

    @contextlib.contextmanager
    def run(self, pos: int, inputs: Sequence[object]) -> Iterator[None]:
        """Around the forward call of the run at step position ``pos``."""
        if pos not in self.positions:
            yield
            return
        if compat.saved_tensors_hooks_active():
            # checkpointing (or the user) owns what is saved here: leave the run alone
            self._current.skipped += 1
            yield
            return
        skip = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        group: list[_Saved] = []

        min_bytes = self.min_bytes

        def pack(t: torch.Tensor) -> object:
            # on the forward's thread once per saved tensor: the cheap checks first
            if (
                t.numel() * t.element_size() < min_bytes
                or t.device.type == "meta"
                or t.untyped_storage().data_ptr() in skip
                or not (t.is_contiguous() or ops.is_dense(t))
            ):
                return t
            s = _Saved(t)
            group.append(s)
            return s

        with torch.autograd.graph.saved_tensors_hooks(pack, self._unpack):
            yield
        self._offload(pos, group)

    def _offload(self, pos: int, group: list[_Saved]) -> None:
        """The run's copies to the host, on the forward's thread right after its call: one
        pool request, one batch of copies and one count for the whole group (per-tensor
        calls cost the host ~0.1 ms a tensor where the forward is host-bound)."""
        if not group:
            with self._lock:
                self._groups[pos] = group
            return
        ts = [s.t for s in group]
        keys = [(tuple(t.shape), tuple(t.stride()), t.dtype, t.is_cuda) for t in ts]
        for s, t, host in zip(group, ts, ops.POOL.acquire_many(keys)):
            s.device, s.host = t.device, host
        moved = sum(t.numel() * t.element_size() for t in ts)
        cuda = [s for s, k in zip(group, keys) if k[3]]
        held = pos in self._held  # kept until its release point (a sync dict's offload_done)
        if cuda:
            # the copy-back follows it on the same stream: no event needed for that
            done = _copy_all(cuda[0].device, [s.host for s in cuda], [s.t for s in cuda])
            side = ops.transfer_stream(cuda[0].device)
            if held:
                self._d2h[pos] = done
            else:
                for s in cuda:
                    s.t.record_stream(side)  # its memory is reused only after the copy ran
        for s in group:
            if s.device.type != "cuda":
                s.host.copy_(s.t)
        ops._count_many("d2h", moved, len(cuda), len(group) - len(cuda), group[0].device)
        if not held:
            for s in group:
                s.t = None
        with self._lock:
            self._groups[pos] = group
            self._current.offloaded_bytes += moved

    def forward_reached(self, pos: int) -> None:
        """The forward of the run at ``pos`` begins."""
        self._at((True, pos))

    def _release(self, runs: Sequence[int]) -> None:
        for p in runs:
            done = self._d2h.pop(p, None)
            group = self._groups.get(p, ())
            if done is not None and group:
                done.wait_once(torch.cuda.current_stream(group[0].device))
            for s in group:
                s.t = None  # freed on the compute stream, which has waited for the copy

    def backward_reached(self, pos: int) -> None:
        """Backward of the run at ``pos`` begins."""
        self._at((False, pos))

    def _at(self, point: Point) -> None:
        """Release, then start copying back, the offloaded runs scheduled at ``point``."""
        if point in self.release_at:
            self._release(self.release_at[point])
        forward, pos = point
        if not forward:  # shares of paced copy-backs due here (or overdue: a run without hook)
            with self._lock:
                due = [k for k in self._later if k >= pos]
                for k in sorted(due, reverse=True):
                    self._reload(self._later.pop(k))
        if point not in self.reload_at:
            return
        runs = self.reload_at[point]
        self._release([p for p in runs if p in self._d2h])  # not yet released
        with self._lock:
            # in the order the backward needs them: later runs first
            group = [s for p in sorted(runs, reverse=True) for s in self._groups.pop(p, [])]
            group = [s for s in group if s.host is not None and s.back is None]
            if forward or not group:
                self._reload(group)
                return
            # spread over the backward starts from here to the first use (max(runs)), each
            # share a slice of the bytes: one long queue of copies would hold the copy engine
            # that other streams' device copies (FSDP2's at world size 1) wait behind
            shares = max(1, pos - max(runs))
            self._reload(_share(group, shares, 0))
            for j in range(1, shares):
                self._later.setdefault(pos - j, []).extend(_share(group, shares, j))

    def _reload(self, group: list[_Saved]) -> None:
        """Start copying ``group`` back to the device (one event for the group)."""
        group = [s for s in group if s.back is None and not s.used]
        if not group:
            return
        for s in group:
            s.back = torch.empty_strided(
                s.host.shape, s.host.stride(), dtype=s.host.dtype, device=s.device
            )
        cuda = [s for s in group if s.device.type == "cuda"]
        done = (
            _copy_all(cuda[0].device, [s.back for s in cuda], [s.host for s in cuda])
            if cuda
            else None
        )
        for s in group:
            if s.device.type == "cuda":
                s.back_done = done
            else:
                s.back.copy_(s.host)
        nbytes = sum(s.host.numel() * s.host.element_size() for s in group)
        ops._count_many("h2d", nbytes, len(cuda), len(group) - len(cuda), group[0].device)
        self._current.prefetched += len(group)

    def _unpack(self, s: object) -> torch.Tensor:
        if isinstance(s, torch.Tensor):
            return s
        if s.t is not None:  # the forward call has not finished (recomputation inside it)
            return s.t
        if s.back is None:
            s.back, s.back_done = _copy_back(s)
        if s.back_done is not None:  # once per group and stream: one event for the group
            s.back_done.wait_once(torch.cuda.current_stream(s.device))
        # the host copy stays with the handle: a second backward (retain_graph) reads it again
        out, s.back, s.back_done, s.used = s.back, None, None, True
        return out


def _share(group: Sequence[_Saved], shares: int, j: int) -> list[_Saved]:
    """The ``j``-th of ``shares`` consecutive slices of ``group`` with about equal bytes."""
    sizes = [s.host.numel() * s.host.element_size() for s in group]
    total, out, acc = max(1, sum(sizes)), [], 0
    for s, b in zip(group, sizes):
        mid = acc + b / 2  # a tensor goes to the share its middle byte falls in
        if min(int(mid * shares / total), shares - 1) == j:
            out.append(s)
        acc += b
    return out


def _copy_back(s: _Saved) -> tuple[torch.Tensor, object]:
    out = torch.empty_strided(s.host.shape, s.host.stride(), dtype=s.host.dtype, device=s.device)
    if out.is_cuda:
        done = _copy_all(s.device, [out], [s.host])
    else:
        out.copy_(s.host)
        done = None
    ops._count("h2d", s.host.numel() * s.host.element_size(), s.device, out.is_cuda)
    return out, done


class _Done:
    """The transfer stream's event for a group of copies; each compute stream waits on it
    once (a group's tensors are unpacked one by one)."""

    __slots__ = ("event", "waited")

    def __init__(self, event):
        self.event, self.waited = event, set()

    def wait_once(self, stream) -> None:
        key = stream.cuda_stream
        if key not in self.waited:
            stream.wait_event(self.event)
            self.waited.add(key)


def _copy_all(device: torch.device, dsts: list[torch.Tensor], srcs: list[torch.Tensor]):
    """Copy each of ``srcs`` into ``dsts`` on the transfer stream, after what the compute
    stream has queued; one stream switch, one batched copy call and one event for the whole
    group (the CPU issues a layer's copies while the GPU may be right behind it). Splitting
    copies into 16 MiB pieces was measured: more CPU time, and the backward's wait at FSDP2's
    reduce-scatter stayed."""
    compute = torch.cuda.current_stream(device)
    side = ops.transfer_stream(device)
    side.wait_stream(compute)
    torch.cuda.set_stream(side)
    try:
        compat.copy_many(dsts, srcs)
    finally:
        torch.cuda.set_stream(compute)
    return _Done(side.record_event())


def sync_schedule(
    layers: Sequence[Sequence[int]], sync: Mapping[int, SyncEntry]
) -> tuple[list[int], dict[Point, list[int]], dict[Point, list[int]]]:
    """A sync dict ``{layer: (offload_fwd, offload_num, reload_fwd, reload_num)}`` over the
    step's layers (lists of run positions, forward order), as in one graph
    (:mod:`memopt.offload.sync`): returns the offloaded runs, reload points and release points.
    ``(True, c)`` is the forward of layer ``c``'s first run, ``(False, c)`` the backward of
    layer ``n-1-c``'s last run; the end of the forward, ``(True, n)``, is the backward of the
    last layer. Raises :class:`memopt.offload.sync.SyncError` naming a layer that cannot be
    scheduled."""
    n = len(layers)
    schedule = build_schedule(sync, n)

    def point(p: SyncPoint) -> Point:
        if p.forward and p.count < n:
            return (True, min(layers[p.count]))
        c = 0 if p.forward else p.count
        return (False, max(layers[n - 1 - c]))

    positions: list[int] = []
    reload: dict[Point, list[int]] = {}
    release: dict[Point, list[int]] = {}
    for s in schedule.layers:
        runs = list(layers[s.layer])
        positions += runs
        reload.setdefault(point(s.reload_start), []).extend(runs)
        release.setdefault(point(s.offload_done), []).extend(runs)
    return positions, reload, release


class UserOffload(NamedTuple):
    """What the user's step offload setting does: ``offload`` (None with a ``note`` saying
    why nothing is offloaded), the runs away while each run runs (``offload_layers=k``; None
    for a sync dict), and the setting's label for the report."""

    offload: StepOffload | None
    away: dict | None
    setting: str
    note: str = ""


def user_step_offload(
    config: MemoptConfig, keys: Sequence[object], reads: Sequence[frozenset[int]] | None = None
) -> UserOffload | None:
    """The user's ``offload_layers=k`` or sync dict for a step whose layers are compiled
    regions (``keys``: one graph key per run, in forward order; ``reads``: per run, the model
    layers whose weights it read, :func:`memopt.step_layers.step_layers`); None without
    either. The user's sync dict wins over ``offload_layers``, as inside one graph."""
    from memopt.errors import ConfigError
    from memopt.step_layers import offload_choice, step_layers

    k, sync = config.offload_k, dict(config.sync or {})
    if not (k or sync):
        return None
    setting = "sync" if sync else f"offload_layers={k}"
    layers = step_layers(keys, reads)
    if len(layers) < 2:
        return UserOffload(None, None, setting, _no_layers(setting))
    release, away = None, None
    if sync:
        positions, reload, release = sync_schedule(layers, sync)  # SyncError names a layer
    elif k >= len(layers):
        raise ConfigError(
            f"offload_layers={k} must be below the number of layers ({len(layers)}): the "
            "last layer's activations are needed as soon as its forward ends"
        )
    else:
        off = offload_choice(layers, k, len(keys))
        positions, reload, away = list(off.runs), dict(off.reload_at), dict(off.away)
    log.info("memopt: offloading the saved tensors of step runs %s (%s)", positions, setting)
    offload = StepOffload(positions, config.offload_min_bytes, reload, release)
    return UserOffload(offload, away, setting)


def _no_layers(setting: str) -> str:
    return (
        f"{setting}: no repeated layers in any compiled region and no repeated regions in "
        "the step (layers compiled one per region); nothing is offloaded. If the model has "
        "layers under another path, pass layers='...'."
    )


def holds_layers(region) -> bool:
    """Whether a region report holds repeated model layers (they offload inside its graph):
    repeated modules that are none of the model's layers do not count (DETR's backbone stages,
    Mochi's feed-forward projections in a fragment of one block: sweep 7)."""
    layers = region.extra.get("layers")
    return bool(layers) and not layers.get("foreign", False)


def region_keys(state, seq) -> list | None:
    """The graph keys of the step's regions ``seq``, or None when one of them holds repeated
    layers (those offload inside their graph, not across regions)."""
    if any(holds_layers(state.regions[i]) for i in set(seq)):
        return None
    return [state.graph_keys.get(i, i) for i in seq]


def split_layers_note(state, seq) -> str | None:
    """The note of an offload setting that offloads nothing because the step mixes the two
    layouts: some regions hold repeated layers (they offload inside their graph, so the step
    does not offload across regions) while the layers the setting selects were split across
    regions by graph breaks (DETR: decoder layers in one region, each encoder layer cut by
    its ``isfinite`` check: sweep 7). None where a setting is absent or some region offloads."""
    config = state.config
    if not (config.offload_k or config.sync):
        return None
    regions = [state.regions[i] for i in dict.fromkeys(seq)]
    if any((r.extra.get("offload") or {}).get("total_bytes") for r in regions):
        return None
    held = [n for r in regions if holds_layers(r) for n in r.extra["layers"]["names"]]
    setting = "sync" if config.sync else f"offload_layers={config.offload_k}"
    return (
        f"{setting}: nothing is offloaded. The regions holding repeated layers ({held[0]} .. "
        f"{held[-1]}) offload inside their graphs, and none holds a layer the setting selects; "
        "the model's other layers are split across compiled regions by graph breaks (see the "
        "plan's graph-break notes), and layers are offloaded across regions only where no "
        "region holds layers. Select layers inside those regions, or remove the graph breaks."
    )


def first_backward_note(state) -> str | None:
    """The note of an offload setting no layer of the first step can take, said as that step's
    backward begins (its forward runs are known then) rather than as the next step begins (a
    one-region model whose layers memopt cannot find: the note came from the second step on).
    ``state``: memopt.state.MemoptState; None when the step has layers or no setting is given."""
    from memopt.step_layers import step_layers

    config, seq = state.config, tuple(state._seq)
    if not (config.offload_k or config.sync) or not seq:
        return None
    keys = region_keys(state, seq)
    if keys is None:
        return None
    reads = state.run_layers[0]
    if len(step_layers(keys, tuple(reads) if len(reads) == len(seq) else None)) >= 2:
        return None
    return _no_layers("sync" if config.sync else f"offload_layers={config.offload_k}")
