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

The step is also cut into *places* at memopt's run hooks (:meth:`PeakProbe.mark`: each run's
forward and its backward begin), each with its own peak (:func:`replay_places`), so that the
step model can be corrected where it misses, not by one constant. A mark holds no allocation:
it reads the allocator's counts of allocations and frees so far, which name the point in the
event record the hook ran at (each ``alloc`` event counts one allocation, each
``free_requested`` one free), and the bytes allocated then, which anchor the place's replay as
the end's reading anchors the step's.

Replaying is plain data (:func:`replay_peak`, :func:`replay_places`); the allocator calls are in
``_torch_compat.allocator``.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from memopt._torch_compat import allocator

log = logging.getLogger("memopt")

BLOCK = 512  # the CUDA caching allocator's smallest block and rounding step


def block_bytes(requested: int) -> int:
    """What ``allocated_bytes`` counts for a request (the allocator's ``round_size``)."""
    return BLOCK if requested < BLOCK else -(-requested // BLOCK) * BLOCK


def _replayed(
    base: int, live: Mapping[int, int], events: Iterable[tuple[str, int, int]]
) -> Iterator[tuple[str, int]]:
    """(action, allocated bytes after it) per event, from ``base`` bytes with ``live`` blocks
    {address: block size}. A free that names no known block (allocated before recording, not in
    ``live``) subtracts its rounded size."""
    sizes = dict(live)
    now = base
    for action, addr, size in events:
        if action == "alloc":
            sizes[addr] = block_bytes(size)
            now += sizes[addr]
        elif action == "free_requested":  # allocated_bytes drops here, not at free_completed
            now -= sizes.pop(addr, block_bytes(size))
        yield action, now


def replay_peak(
    base: int, live: Mapping[int, int], events: Iterable[tuple[str, int, int]]
) -> tuple[int, int]:
    """(peak, end) of the allocated bytes over ``events`` = (action, address, requested size),
    starting at ``base`` bytes with ``live`` blocks (:func:`_replayed`)."""
    now = peak = base
    for action, now in _replayed(base, live, events):
        if action == "alloc":
            peak = max(peak, now)
    return peak, now


@dataclass(frozen=True)
class Mark:
    """A point in the event record: ``label`` (what began there), the allocations and frees
    since recording began, and the bytes allocated then."""

    label: Hashable
    allocs: int
    frees: int
    allocated: int


def replay_places(
    base: int,
    live: Mapping[int, int],
    events: Iterable[tuple[str, int, int]],
    marks: Sequence[Mark],
    end_allocated: int,
) -> list[tuple[Hashable, int]] | None:
    """Each place's peak, in order: the record cut at ``marks``, a place from each mark to the
    next (the last to the end; what comes before the first mark is no place). A place adds the
    larger of its two ends' anchors (the bytes read there less the replay's bytes: what unsplit
    blocks add; ``end_allocated`` at the end). None when a mark names no point of the record
    (counts the events pass without meeting, or never reach)."""
    now, allocs, frees, k = base, 0, 0, 0
    places: list[tuple[Hashable, int]] = []
    label, peak, anchor = None, base, 0  # the place replayed now (None: before the first mark)

    def reach() -> bool:
        """Cut at each mark the counts meet now; False once they passed the next mark."""
        nonlocal label, peak, anchor, k
        while k < len(marks) and (allocs, frees) == (marks[k].allocs, marks[k].frees):
            end = max(0, marks[k].allocated - now)
            if label is not None:
                places.append((label, peak + max(anchor, end)))
            label, peak, anchor, k = marks[k].label, now, end, k + 1
        return k == len(marks) or (allocs <= marks[k].allocs and frees <= marks[k].frees)

    for action, after in _replayed(base, live, events):
        if not reach():
            return None
        now = after
        if action == "alloc":
            allocs += 1
            peak = max(peak, now)
        elif action == "free_requested":
            frees += 1
    if not reach() or k < len(marks):
        return None
    if label is not None:
        places.append((label, peak + max(anchor, end_allocated - now, 0)))
    return places


def allocated(device: torch.device) -> tuple[int, int]:
    """(current, peak) CUDA bytes allocated on ``device``, as ``torch.cuda.memory_allocated``
    and ``max_memory_allocated`` give them, read from the allocator's nested statistics:
    those two flatten every statistic into a new dict per call (about 250 µs on an H200 host),
    and memopt reads the allocator twice per region run under a byte budget (Whisper, 12 runs
    a step, paid 7 ms per 25 ms step for it)."""
    stats = torch.cuda.memory_stats_as_nested_dict(device).get("allocated_bytes", {})
    a = stats.get("all", {})
    return a.get("current", 0), a.get("peak", 0)


def _counts(device: torch.device) -> tuple[int, int, int]:
    """(bytes allocated, allocations, frees so far) on ``device``, in one read."""
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    count = stats.get("allocation", {}).get("all", {})
    current = stats.get("allocated_bytes", {}).get("all", {}).get("current", 0)
    return current, count.get("allocated", 0), count.get("freed", 0)


@dataclass
class PeakProbe:
    device: torch.device
    base: int
    live: dict[int, int]
    counts: tuple[int, int] = (0, 0)  # allocations and frees as recording began
    marks: list[Mark] = field(default_factory=list)
    places: list[tuple[Hashable, int]] | None = None
    """Each marked place's peak (:func:`replay_places`), once finished; None if not known."""

    @classmethod
    def start(cls, device: torch.device) -> PeakProbe | None:
        """Begin recording; None when the allocator is already recording for someone else
        (their history is theirs: memopt neither clears nor stops it)."""
        if allocator.alloc_history_enabled():
            log.info("memopt: CUDA memory history is on already; the step's peak is not probed")
            return None
        torch.cuda.synchronize(device)
        live = allocator.live_blocks(device)
        base, allocs, frees = _counts(device)
        allocator.alloc_history(True)
        return cls(device, base, live, (allocs, frees))

    def mark(self, label: Hashable) -> None:
        """A place begins here (a run hook): where in the record, no allocation."""
        current, allocs, frees = _counts(self.device)
        self.marks.append(Mark(label, allocs - self.counts[0], frees - self.counts[1], current))

    def finish(self) -> int | None:
        """Stop recording; the step's peak allocated bytes (None if the record overflowed)."""
        torch.cuda.synchronize(self.device)
        end_allocated = allocated(self.device)[0]
        events = allocator.alloc_events(self.device)
        allocator.alloc_history(False)
        if events is None:
            return None
        peak, end = replay_peak(self.base, self.live, events)
        peak += max(0, end_allocated - end)
        if self.marks:
            self.places = replay_places(self.base, self.live, events, self.marks, end_allocated)
        # the places' own anchors may see an unsplit block the end's reading no longer holds
        return max([peak, *(p for _, p in self.places or ())])
