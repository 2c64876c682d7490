"""memopt's offload ops (``torch.ops.memopt.*``), their CUDA streams and events, and the host
buffer pool.

The ops are functional -- each returns a tensor and takes the tensors it must follow as
arguments -- so Inductor can neither drop them nor reorder them against their data edges::

    h  = memopt.offload(t, after)             # event on the compute stream; D2H on the
                                              # transfer stream into a pooled pinned buffer
    h' = memopt.wait_offload(h, [t], after)   # compute stream waits for the D2H; t may die
    d  = memopt.reload(h', device, after, stride)  # H2D on the transfer stream into memory
                                              # allocated on the compute stream (traced layout)
    d' = memopt.wait_reload(d, after)         # compute stream waits for the H2D
    x' = memopt.barrier(x, [deps])            # no-op alias: whatever reads x' runs after deps

``after`` arguments are ordering-only inputs (the op runs after that tensor exists).
``wait_offload``, ``wait_reload`` and ``barrier`` return an alias of their first argument
(schema ``Tensor(a) -> Tensor(a)``), so they add ordering without copies. They are defined
with ``torch.library.Library`` because ``custom_op`` forbids aliased returns; they are only
ever inserted after partitioning, never traced through functionalization.

On the CPU (no CUDA tensor) the same ops copy synchronously into a separate host buffer, so
placement and numerics can be tested without a GPU. One transfer stream per device carries
every copy: a pooled pinned buffer is reused only by a later copy on that same stream, so
reuse is ordered after the previous host-to-device read without ``record_stream``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from memopt import _torch_compat as compat

NAMESPACE = "memopt"
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")

_UNSAFE = compat.cudagraph_unsafe_tags()  # none of them inside a CUDA graph capture
_LIB.define(
    "offload(Tensor t, Tensor? after=None, SymInt[]? stride=None) -> Tensor",
    tags=compat.exact_strides_tags() + _UNSAFE,
)
_LIB.define(
    "wait_offload(Tensor(a) host, Tensor[] keep, Tensor? after=None) -> Tensor(a)", tags=_UNSAFE
)
_LIB.define(
    "reload(Tensor host, Device device, Tensor? after=None, SymInt[]? stride=None) -> Tensor",
    tags=_UNSAFE,
)
_LIB.define("wait_reload(Tensor(a) t, Tensor? after=None) -> Tensor(a)", tags=_UNSAFE)
_LIB.define("barrier(Tensor(a) x, Tensor[] deps) -> Tensor(a)", tags=_UNSAFE)


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t`` covers its memory span exactly once, in any dimension order (so a copy
    with the same strides is one flat memcpy). Symbolic sizes are judged by their hints."""
    dims = sorted(
        (compat.int_hint(st), compat.int_hint(sz))
        for sz, st in zip(t.shape, t.stride())
        if compat.int_hint(sz) != 1
    )
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def contiguous_strides(shape: Sequence) -> tuple:
    strides, acc = [], 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc = acc * (max(s, 1) if isinstance(s, int) else s)
    return tuple(reversed(strides))


def host_stride(t: torch.Tensor) -> tuple:
    """The host copy keeps a dense tensor's layout (a flat memcpy); others become contiguous."""
    if is_dense(t):
        return tuple(t.stride())
    return contiguous_strides(t.shape)


# --------------------------------------------------------------------------- host buffer pool


@dataclass
class _Block:
    data: torch.Tensor
    idle_refs: int


@dataclass
class PoolStats:
    blocks: int = 0
    bytes: int = 0
    in_use_bytes: int = 0
    allocations: int = 0
    """Buffers ever allocated (cudaHostAlloc for pinned memory)."""
    reuses: int = 0


class HostBufferPool:
    """Host buffers reused across steps, pinned when the data comes from a GPU, kept per
    layout (shape, strides, dtype) or per byte size.

    A buffer is free again when nothing but the pool references its storage: the host
    tensor handed out (and everything aliasing it) is gone. Buffers are kept until
    :meth:`clear`, so a steady training loop allocates only in its first steps.
    """

    _ALIGN = 512

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_lists: dict[tuple[int, bool], list[_Block]] = {}
        self._allocations = 0
        self._reuses = 0

    def acquire(self, nbytes: int, pinned: bool) -> torch.Tensor:
        """A 1-D uint8 host tensor of at least ``nbytes`` bytes, not in use by anyone."""
        size = max(self._ALIGN, -(-nbytes // self._ALIGN) * self._ALIGN)
        return self._acquire(((size,), (1,), torch.uint8, pinned))

    def acquire_like(
        self, shape: tuple, stride: tuple, dtype: torch.dtype, pinned: bool
    ) -> torch.Tensor:
        """A host tensor of exactly this layout, not in use by anyone. A training loop asks
        for the same layouts every step, so this hands out ready tensors: no slicing or
        reinterpreting per copy (the offload op runs on the CPU's critical path)."""
        return self._acquire((shape, stride, dtype, pinned))

    def acquire_many(self, keys: Sequence[tuple]) -> list[torch.Tensor]:
        """:meth:`acquire_like` for each ``(shape, stride, dtype, pinned)`` under one lock (a
        run's saved tensors at once)."""
        with self._lock:
            return [self._acquire_locked(k) for k in keys]

    def _acquire(self, key: tuple) -> torch.Tensor:
        with self._lock:
            return self._acquire_locked(key)

    def _acquire_locked(self, key: tuple) -> torch.Tensor:
        blocks = self._free_lists.setdefault(key, [])
        for b in blocks:
            if compat.storage_use_count(b.data) == b.idle_refs:
                self._reuses += 1
                # a new tensor on the storage: while it lives, the use count says so
                return b.data.detach()
        shape, stride, dtype, pinned = key
        data = torch.empty_strided(shape, stride, dtype=dtype, pin_memory=pinned)
        blocks.append(_Block(data, compat.storage_use_count(data)))
        self._allocations += 1
        return data.detach()

    def owns(self, t: torch.Tensor) -> bool:
        """Whether ``t`` lives in one of the pool's buffers."""
        ptr = t.untyped_storage().data_ptr()
        with self._lock:
            return any(b.data.data_ptr() == ptr for bs in self._free_lists.values() for b in bs)

    def stats(self) -> PoolStats:
        with self._lock:
            blocks = [b for bs in self._free_lists.values() for b in bs]
            in_use = sum(
                _nbytes(b.data) for b in blocks if compat.storage_use_count(b.data) != b.idle_refs
            )
            return PoolStats(
                blocks=len(blocks),
                bytes=sum(_nbytes(b.data) for b in blocks),
                in_use_bytes=in_use,
                allocations=self._allocations,
                reuses=self._reuses,
            )

    def clear(self) -> None:
        """Drop the free buffers (buffers still in use stay until released)."""
        with self._lock:
            for key, blocks in list(self._free_lists.items()):
                kept = [b for b in blocks if compat.storage_use_count(b.data) != b.idle_refs]
                self._free_lists[key] = kept


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


POOL = HostBufferPool()


# --------------------------------------------------------------------------- copy statistics


@dataclass
class CopyStats:
    """Counters of the copies the ops issued (reset with :func:`reset_copy_stats`)."""

    d2h_bytes: int = 0
    d2h_copies: int = 0
    h2d_bytes: int = 0
    h2d_copies: int = 0
    async_copies: int = 0
    """Copies issued on a CUDA transfer stream."""
    sync_copies: int = 0
    """Copies done synchronously (the tensor was not on a CUDA device)."""
    contiguous_copies: int = 0
    """Tensors copied on the compute stream into their host layout before their offload
    (non-dense ones, and those the compiled graph handed over in another layout)."""
    relaid_hosts: int = 0
    """Reloads whose host copy came in another layout than the traced one: the compiled graph
    copied it out of the pool (0 since the forward returns host copies flat)."""
    devices: set = field(default_factory=set)


_STATS = CopyStats()
_STATS_LOCK = threading.Lock()


def copy_stats() -> CopyStats:
    with _STATS_LOCK:
        return CopyStats(**{**_STATS.__dict__, "devices": set(_STATS.devices)})


def reset_copy_stats() -> None:
    global _STATS
    with _STATS_LOCK:
        _STATS = CopyStats()


def _count_many(
    direction: str, nbytes: int, async_copies: int, sync_copies: int, device: torch.device
) -> None:
    """:func:`_count` for a group of copies at once (``nbytes`` in all)."""
    with _STATS_LOCK:
        if direction == "d2h":
            _STATS.d2h_bytes += nbytes
            _STATS.d2h_copies += async_copies + sync_copies
        else:
            _STATS.h2d_bytes += nbytes
            _STATS.h2d_copies += async_copies + sync_copies
        _STATS.async_copies += async_copies
        _STATS.sync_copies += sync_copies
        _STATS.devices.add(str(device))


def _count(direction: str, nbytes: int, device: torch.device, is_async: bool) -> None:
    _count_many(direction, nbytes, int(is_async), int(not is_async), device)


# --------------------------------------------------------------------------- streams and events

_STREAMS: dict[int, torch.cuda.Stream] = {}
_PENDING_D2H: dict[int, tuple] = {}
_PENDING_H2D: dict[int, tuple] = {}
_PENDING_LOCK = threading.Lock()


def transfer_stream(device: torch.device) -> torch.cuda.Stream:
    """The dedicated copy stream of a CUDA device (created on first use)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _PENDING_LOCK:
        s = _STREAMS.get(index)
        if s is None:
            s = torch.cuda.Stream(device=index)
            _STREAMS[index] = s
        return s


def pending_copies() -> int:
    """Copies issued and not yet waited on (0 after a complete step)."""
    with _PENDING_LOCK:
        return len(_PENDING_D2H) + len(_PENDING_H2D)


def _issue_on_transfer_stream(device: torch.device, dst: torch.Tensor, src: torch.Tensor):
    # Runs on the CPU's critical path early in the forward (the GPU is right behind the CPU
    # there), so it uses the fewest calls: no StreamContext, events made by record_event.
    compute = torch.cuda.current_stream(device)
    side = transfer_stream(device)
    side.wait_stream(compute)
    torch.cuda.set_stream(side)
    try:
        dst.copy_(src, non_blocking=True)
    finally:
        torch.cuda.set_stream(compute)
    return side.record_event()


# --------------------------------------------------------------------------- op bodies


#: (shape, strides) -> the host copy's strides; a training loop repeats a few layouts
_HOST_STRIDES: dict[tuple, tuple] = {}


def same_layout(shape: Sequence, a: Sequence, b: Sequence) -> bool:
    """Whether strides ``a`` and ``b`` place every element of ``shape`` alike (dimensions of
    size 1 have no stride that matters)."""
    return all(int(s) == 1 or int(x) == int(y) for s, x, y in zip(shape, a, b))


def _offload(
    t: torch.Tensor, after: torch.Tensor | None = None, stride: Sequence[int] | None = None
) -> torch.Tensor:
    """``stride``: the host copy's layout, fixed when the graph was rewritten (the traced
    tensor's); the compiled graph may hand over ``t`` in another layout (Inductor picks its
    buffers' layouts), and then ``t`` is first copied on the device into that layout. Without
    it, the host copy keeps ``t``'s layout when dense (``host_stride``)."""
    shape, strides = tuple(t.shape), t.stride()
    if stride is not None:
        stride = tuple(int(x) for x in stride)
    else:
        stride = _HOST_STRIDES.get((shape, strides))
        if stride is None:
            stride = _HOST_STRIDES.setdefault((shape, strides), host_stride(t))
    src = t
    if not same_layout(shape, stride, strides):
        # on the compute stream, before the copy is issued: one flat copy to the host after
        src = torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)
        with _STATS_LOCK:
            _STATS.contiguous_copies += 1
    nbytes = t.numel() * t.element_size()
    host = POOL.acquire_like(shape, stride, t.dtype, pinned=t.is_cuda)
    if t.is_cuda and nbytes:
        done = _issue_on_transfer_stream(t.device, host, src)
        with _PENDING_LOCK:
            # src stays referenced until the wait: a temporary contiguous copy must not be
            # freed (and its memory reused by the compute stream) while the copy reads it.
            _PENDING_D2H[host.data_ptr()] = (done, src, t.device)
        _count("d2h", nbytes, t.device, True)
    else:
        host.copy_(src)
        _count("d2h", nbytes, t.device, False)
    return host


def _wait_offload(
    host: torch.Tensor, keep: Sequence[torch.Tensor], after: torch.Tensor | None = None
) -> torch.Tensor:
    with _PENDING_LOCK:
        entry = _PENDING_D2H.pop(host.data_ptr(), None)
    if entry is not None:
        done, _src, device = entry
        torch.cuda.current_stream(device).wait_event(done)
    return host


def _reload(
    host: torch.Tensor,
    device: torch.device,
    after: torch.Tensor | None = None,
    stride: Sequence[int] | None = None,
) -> torch.Tensor:
    """``stride``: the layout the graph was traced with (what the backward's views of the
    copy assume), whatever layout the host copy came in: Inductor may re-lay a forward
    output (its layout optimization gives a graph with convolutions channels-last outputs)."""
    device = torch.device(device)
    layout = tuple(stride) if stride is not None else host.stride()
    if not same_layout(host.shape, layout, host.stride()):
        with _STATS_LOCK:
            _STATS.relaid_hosts += 1
    out = torch.empty_strided(host.shape, layout, dtype=host.dtype, device=device)
    nbytes = host.numel() * host.element_size()
    if out.is_cuda and nbytes:
        done = _issue_on_transfer_stream(device, out, host)
        with _PENDING_LOCK:
            _PENDING_H2D[out.data_ptr()] = (done, host, device)
        _count("h2d", nbytes, device, True)
    else:
        out.copy_(host)
        _count("h2d", nbytes, device, False)
    return out


def _wait_reload(t: torch.Tensor, after: torch.Tensor | None = None) -> torch.Tensor:
    with _PENDING_LOCK:
        entry = _PENDING_H2D.pop(t.data_ptr(), None)
    if entry is not None:
        done, _host, device = entry
        torch.cuda.current_stream(device).wait_event(done)
    return t


def _barrier(x: torch.Tensor, deps: Sequence[torch.Tensor]) -> torch.Tensor:
    return x


_LIB.impl("offload", _offload, "CompositeExplicitAutograd")
_LIB.impl("wait_offload", _wait_offload, "CompositeExplicitAutograd")
_LIB.impl("reload", _reload, "CompositeExplicitAutograd")
_LIB.impl("wait_reload", _wait_reload, "CompositeExplicitAutograd")
_LIB.impl("barrier", _barrier, "CompositeExplicitAutograd")


# --------------------------------------------------------------------------- fake (meta) kernels


def _offload_fake(t: torch.Tensor, after=None, stride=None) -> torch.Tensor:
    layout = tuple(stride) if stride is not None else host_stride(t)
    return torch.empty_strided(t.shape, layout, dtype=t.dtype, device="cpu")


def _reload_fake(host: torch.Tensor, device: torch.device, after=None, stride=None) -> torch.Tensor:
    layout = tuple(stride) if stride is not None else host.stride()
    return torch.empty_strided(host.shape, layout, dtype=host.dtype, device=device)


def _alias_fake(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return x


torch.library.register_fake(f"{NAMESPACE}::offload", _offload_fake, lib=_LIB)
torch.library.register_fake(f"{NAMESPACE}::wait_offload", _alias_fake, lib=_LIB)
torch.library.register_fake(f"{NAMESPACE}::reload", _reload_fake, lib=_LIB)
torch.library.register_fake(f"{NAMESPACE}::wait_reload", _alias_fake, lib=_LIB)
torch.library.register_fake(f"{NAMESPACE}::barrier", _alias_fake, lib=_LIB)

offload = torch.ops.memopt.offload.default
wait_offload = torch.ops.memopt.wait_offload.default
reload = torch.ops.memopt.reload.default
wait_reload = torch.ops.memopt.wait_reload.default
barrier = torch.ops.memopt.barrier.default
ALL_OPS = (offload, wait_offload, reload, wait_reload, barrier)


def install_inductor_lowerings() -> bool:
    """Tell Inductor that a reload's output is a fresh (aligned) device allocation and that
    ``wait_reload``/``barrier`` are as aligned as their first argument, so kernels reading a
    reloaded tensor compile exactly as they do reading the saved tensor (bitwise gradients).
    False where this torch's lowering internals differ (then nothing changes)."""
    return compat.install_alignment_lowerings(
        {reload: "fresh", wait_reload: "first", barrier: "first"}
    )
