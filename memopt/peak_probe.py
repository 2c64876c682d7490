"""The CUDA peak of one training step, measured without touching the user's peak counters.

``torch.cuda.max_memory_allocated`` is the record since the last reset: a step that stays
below an earlier record (the unplanned first steps, which compile) is invisible to it, and
resetting it would change what the user measures. Instead, for one step, the caching
allocator records its alloc/free events (no stack traces) and the peak is replayed from them:

    probe = PeakProbe.start(device)        # allocated bytes now, the live blocks, recording on
    ... the step runs ...
    peak = probe.finish()                  # recording off; replay alloc (+) / free (-) events

Sizes follow the allocator's own accounting (``allocated_bytes`` counts blocks): a block
alive at the start counts its block size, one allocated during the step its request rounded
to the allocator's 512-byte blocks; a block the allocator did not split (up to 1 MiB larger
than asked) is under-counted, so the replay is anchored at the end as well: the bytes
allocated when recording stops minus the replay's end is added to the peak when positive.

Replaying is plain data (:func:`replay_peak`); the allocator calls are in
``_torch_compat.allocator``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from memopt._torch_compat import allocator

log = logging.getLogger("memopt")

BLOCK = 512  # the CUDA caching allocator's smallest block and rounding step


def block_bytes(requested: int) -> int:
    """What ``allocated_bytes`` counts for a request (the allocator's ``round_size``)."""
    return BLOCK if requested < BLOCK else -(-requested // BLOCK) * BLOCK


def replay_peak(
    base: int, live: Mapping[int, int], events: Iterable[tuple[str, int, int]]
) -> tuple[int, int]:
    """(peak, end) of the allocated bytes over ``events`` = (action, address, requested size),
    starting at ``base`` bytes with ``live`` blocks {address: block size}. A free that names no
    known block (allocated before recording, not in ``live``) subtracts its rounded size."""
    sizes = dict(live)
    now = peak = base
    for action, addr, size in events:
        if action == "alloc":
            sizes[addr] = block_bytes(size)
            now += sizes[addr]
            peak = max(peak, now)
        elif action == "free_requested":  # allocated_bytes drops here, not at free_completed
            now -= sizes.pop(addr, block_bytes(size))
    return peak, now


def allocated(device: torch.device) -> tuple[int, int]:
    """(current, peak) CUDA bytes allocated on ``device``, as ``torch.cuda.memory_allocated``
    and ``max_memory_allocated`` give them, read from the allocator's nested statistics:
    those two flatten every statistic into a new dict per call (about 250 µs on an H200 host),
    and memopt reads the allocator twice per region run under a byte budget (Whisper, 12 runs
    a step, paid 7 ms per 25 ms step for it)."""
    stats = torch.cuda.memory_stats_as_nested_dict(device).get("allocated_bytes", {})
    a = stats.get("all", {})
    return a.get("current", 0), a.get("peak", 0)


@dataclass
class PeakProbe:
    device: torch.device
    base: int
    live: dict[int, int]

    @classmethod
    def start(cls, device: torch.device) -> PeakProbe | None:
        """Begin recording; None when the allocator is already recording for someone else
        (their history is theirs: memopt neither clears nor stops it)."""
        if allocator.alloc_history_enabled():
            log.info("memopt: CUDA memory history is on already; the step's peak is not probed")
            return None
        torch.cuda.synchronize(device)
        live = allocator.live_blocks(device)
        base = allocated(device)[0]
        allocator.alloc_history(True)
        return cls(device, base, live)

    def finish(self) -> int | None:
        """Stop recording; the step's peak allocated bytes (None if the record overflowed)."""
        torch.cuda.synchronize(self.device)
        end_allocated = allocated(self.device)[0]
        events = allocator.alloc_events(self.device)
        allocator.alloc_history(False)
        if events is None:
            return None
        peak, end = replay_peak(self.base, self.live, events)
        return peak + max(0, end_allocated - end)
