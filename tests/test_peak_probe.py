"""The step's peak replayed from the allocator's alloc/free record (memopt.peak_probe), in
MiB units: exact bytes, blocks from before the record, frees before completion."""

from __future__ import annotations

from memopt.peak_probe import block_bytes, replay_peak

MiB = 2**20


def test_block_bytes_follow_the_allocators_rounding():
    assert [block_bytes(n) for n in (1, 511, 512, 513, 3 * MiB + 1)] == [
        512,
        512,
        512,
        1024,
        3 * MiB + 512,
    ]


def test_replay_peak_counts_allocs_and_frees_in_order():
    events = [
        ("alloc", 1, 4 * MiB),
        ("alloc", 2, 2 * MiB),
        ("free_requested", 1, 4 * MiB),
        ("free_completed", 1, 4 * MiB),  # allocated bytes dropped at the request already
        ("alloc", 3, 3 * MiB),
        ("segment_alloc", 9, 20 * MiB),  # reserved, not allocated
    ]
    assert replay_peak(10 * MiB, {}, events) == (16 * MiB, 15 * MiB)


def test_replay_peak_frees_blocks_from_before_the_record_at_their_block_size():
    live = {7: 5 * MiB + 512 * 1024}  # an unsplit block: larger than its request
    events = [("free_requested", 7, 5 * MiB), ("alloc", 8, 1 * MiB), ("free_requested", 6, 100)]
    peak, end = replay_peak(20 * MiB, live, events)
    assert (peak, end) == (20 * MiB, 20 * MiB - 5 * MiB - 512 * 1024 + 1 * MiB - 512)
