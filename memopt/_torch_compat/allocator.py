"""The CUDA caching allocator as memopt reads it (private API): its event record, for the
step's measured peak (``memopt.peak_probe``), and the cuBLAS workspaces torch allocates through
it outside every compiled graph (the region report's Inductor section)."""

from __future__ import annotations

import torch

ALLOC_EVENTS_MAX = 2_000_000  # a step with more events than this is not probed


def alloc_history_enabled() -> bool:
    """Whether the CUDA caching allocator records its history (someone else's recording)."""
    fn = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    return bool(fn()) if fn is not None else True  # unknown: assume someone is recording


def alloc_history(on: bool) -> None:
    """Record alloc/free events without stack traces (on), or stop and drop them (off)."""
    import inspect

    record = torch.cuda.memory._record_memory_history
    clear = "clear_history" in inspect.signature(record).parameters
    extra = {"clear_history": True} if clear else {}
    if on:
        record("all", context=None, stacks="python", max_entries=ALLOC_EVENTS_MAX, **extra)
    else:
        record(None, **extra)


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def live_blocks(device: torch.device) -> dict[int, int]:
    """{address: block size} of the blocks allocated on ``device`` now."""
    idx = _device_index(device)
    out: dict[int, int] = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        if seg.get("device", idx) != idx:
            continue
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                out[b["address"]] = b["size"]
    return out


def alloc_events(device: torch.device) -> list[tuple[str, int, int]] | None:
    """The recorded (action, address, requested size) events of ``device``, oldest first;
    None when the record is full (its oldest events were dropped)."""
    traces = torch.cuda.memory._snapshot()["device_traces"]
    idx = _device_index(device)
    trace = traces[idx] if idx < len(traces) else []
    if len(trace) >= ALLOC_EVENTS_MAX:
        return None
    return [(e["action"], e["addr"], e["size"]) for e in trace if "addr" in e]


#: cuBLAS workspaces a training step holds outside the compiled graphs: one per (handle,
#: stream), and the forward's thread and autograd's device thread each take a handle. Measured
#: on torch 2.11 with an H100 (docs/zoo.md, eighteenth session): 68.6-70.0 MB allocated outside
#: the graphs on four models, against 2 x 32 MiB = 67.1 MB.
CUBLAS_WORKSPACES_PER_STEP = 2


def cublas_workspace_bytes(device: torch.device | str) -> int:
    """The bytes of one cuBLAS workspace torch allocates on ``device`` (0 off CUDA): the
    ``:SIZE_KiB:COUNT`` pairs of ``CUBLAS_WORKSPACE_CONFIG`` summed, else ATen's default
    (``parseChosenWorkspaceSize`` in CublasHandlePool.cpp): 32 MiB on Hopper (compute
    capability 9.x; newer torch also on Blackwell, 10.x and 12.x), else 4096 KiB x 2 + 16 KiB x 8."""
    import os
    import re

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return 0
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    major, _ = torch.cuda.get_device_capability(device)
    return 4096 * 8 * 1024 if major in (9, 10, 12) else 4096 * 1024 * 2 + 16 * 1024 * 8


def device_room(device: torch.device, budget: int | None = None) -> int:
    """Bytes memopt's own measurements (device rates, kernel times) may allocate on ``device``
    now without passing what the step may peak at: what the device has free (the driver's
    free memory and the allocator's cached blocks) and, under a byte ``budget``, the budget less
    what is allocated. They run inside the first compile, in the step whose peak the budget
    caps: a calibration that took 2 GiB there put ViT's first step 25% over a 1.9 GB budget."""
    idx = _device_index(device)
    free, _ = torch.cuda.mem_get_info(idx)
    allocated = torch.cuda.memory_allocated(idx)
    room = free + torch.cuda.memory_reserved(idx) - allocated
    if budget is not None:
        room = min(room, budget - allocated)
    return max(0, room)
