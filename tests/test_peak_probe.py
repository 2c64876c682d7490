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


def test_replay_places_cuts_the_record_at_the_marks_counts():
    """A place per mark, from it to the next (the last to the end), each with its own peak;
    a mark is found by the allocations and frees counted before it."""
    from memopt.peak_probe import Mark, replay_places

    events = [
        ("alloc", 1, 4 * MiB),  # run 0's forward
        ("alloc", 2, 2 * MiB),
        ("free_requested", 2, 2 * MiB),
        ("free_completed", 2, 2 * MiB),
        ("alloc", 3, 1 * MiB),  # run 0's backward: 1 alloc + frees
        ("free_requested", 1, 4 * MiB),
        ("free_requested", 3, 1 * MiB),
        ("alloc", 4, 3 * MiB),  # the optimizer step
        ("free_requested", 4, 3 * MiB),
    ]
    marks = [Mark("f0", 0, 0, 10 * MiB), Mark("b0", 2, 1, 14 * MiB), Mark("opt", 3, 3, 10 * MiB)]
    assert replay_places(10 * MiB, {}, events, marks, 10 * MiB) == [
        ("f0", 16 * MiB),
        ("b0", 15 * MiB),
        ("opt", 13 * MiB),
    ]
    # what comes before the first mark is no place
    late = [Mark("b0", 2, 1, 14 * MiB)]
    assert replay_places(10 * MiB, {}, events, late, 10 * MiB) == [("b0", 15 * MiB)]


def test_replay_places_adds_an_unsplit_blocks_bytes_where_the_readings_show_them():
    """The allocator counts an unsplit block's whole size; the replay its request. A place adds
    the larger of its ends' gaps between the reading and the replay."""
    from memopt.peak_probe import Mark, replay_places

    events = [("alloc", 1, 4 * MiB), ("alloc", 2, 1 * MiB), ("free_requested", 2, 1 * MiB)]
    marks = [Mark("a", 0, 0, 0), Mark("b", 1, 0, 4 * MiB + 512 * 1024)]  # block 1 unsplit
    assert replay_places(0, {}, events, marks, 4 * MiB + 512 * 1024) == [
        ("a", 4 * MiB + 512 * 1024),
        ("b", 5 * MiB + 512 * 1024),
    ]


def test_replay_places_is_unknown_when_a_mark_names_no_point_of_the_record():
    from memopt.peak_probe import Mark, replay_places

    events = [("alloc", 1, MiB), ("alloc", 2, MiB), ("free_requested", 1, MiB)]
    passed = [Mark("a", 0, 0, 0), Mark("b", 0, 1, 0)]  # a free before any... never met
    assert replay_places(0, {}, events, passed, MiB) is None
    beyond = [Mark("a", 0, 0, 0), Mark("b", 5, 0, 0)]  # counts the record never reaches
    assert replay_places(0, {}, events, beyond, MiB) is None
