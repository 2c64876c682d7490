"""Flat fp32 buffers for the host optimizer: where each parameter lives, how steps are chunked.

Plain ints only. A parameter group's master weights, gradients, ``exp_avg`` and ``exp_avg_sq``
are each one flat buffer; parameter ``k`` owns ``[offsets[k], offsets[k] + numels[k])``. The
update walks the buffer in chunks of about ``chunk_numel`` elements (one vectorized kernel call
each, and the unit of NVMe I/O); a chunk lists its per-parameter segments so parameters without
a gradient this step are skipped, as torch.optim.AdamW does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Parameters start on a multiple of this many elements (64 bytes of fp32: one cache line).
ALIGN_ELEMS = 16


@dataclass(frozen=True)
class Segment:
    """Elements ``[start, end)`` of the flat buffer, all belonging to parameter ``param``."""

    param: int
    start: int
    end: int


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    segments: tuple[Segment, ...]


def flat_offsets(numels: Sequence[int], align: int = ALIGN_ELEMS) -> tuple[list[int], int]:
    """Offsets of each parameter in the flat buffer and the buffer's total length."""
    offsets, off = [], 0
    for n in numels:
        offsets.append(off)
        off = -(-(off + int(n)) // align) * align
    return offsets, off


def make_chunks(offsets: Sequence[int], numels: Sequence[int], chunk_numel: int) -> list[Chunk]:
    """Cut ``[0, end of last parameter)`` into chunks of ``chunk_numel`` elements (the last one
    shorter); a parameter may span chunks. Alignment padding belongs to no segment."""
    if chunk_numel <= 0:
        raise ValueError(f"chunk_numel={chunk_numel} must be positive")
    if not numels:
        return []
    end = offsets[-1] + numels[-1]
    chunks = []
    for c0 in range(0, end, chunk_numel):
        c1 = min(c0 + chunk_numel, end)
        segs = []
        for k, (o, n) in enumerate(zip(offsets, numels)):
            s, e = max(o, c0), min(o + n, c1)
            if s < e:
                segs.append(Segment(k, s, e))
        chunks.append(Chunk(c0, c1, tuple(segs)))
    return chunks


def merge_runs(segments: Sequence[Segment], keep: Sequence[bool], steps: Sequence[int]):
    """Kept segments merged into maximal runs ``(start, end, step)``: adjacent parameters with
    the same step count are updated by one kernel call over the run (padding included: its
    gradient is zero and it never reaches a parameter)."""
    runs: list[tuple[int, int, int]] = []
    prev = None
    for seg in segments:
        if not keep[seg.param]:
            prev = None
            continue
        st = steps[seg.param]
        if prev is not None and runs[-1][2] == st and prev == seg.param - 1:
            runs[-1] = (runs[-1][0], seg.end, st)
        else:
            runs.append((seg.start, seg.end, st))
        prev = seg.param
    return runs
