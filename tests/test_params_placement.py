"""Placement plan, arena offsets, flat-buffer chunks and the report: exact numbers, no tracing."""

import pytest
import torch

from memopt.params import format_placement, plan_layer_offload
from memopt.params.arena import SlotArena
from memopt.params.flat import Segment, flat_offsets, make_chunks, merge_runs
from memopt.params.placement import TensorSlice, slot_layout, spread

MiB = 2**20


def test_half_of_eight_equal_layers():
    plan = plan_layer_offload([MiB] * 8, 0.5)
    # budget 4 MiB = 2 resident + 2 ring slots -> 6 layers stream, spread from layer 0
    assert plan.budget_bytes == 4 * MiB
    assert plan.streamed == (True, True, True, False, True, True, True, False)
    assert plan.slot_of == (0, 1, 0, None, 1, 0, 1, None)
    assert (plan.slots, plan.slot_bytes, plan.ring_bytes) == (2, MiB, 2 * MiB)
    assert (plan.resident_bytes, plan.gpu_bytes, plan.host_bytes) == (2 * MiB, 4 * MiB, 6 * MiB)


def test_zero_fraction_streams_nothing():
    plan = plan_layer_offload([MiB] * 4, 0.0)
    assert plan.streamed == (False,) * 4 and plan.ring_bytes == 0 and plan.gpu_bytes == 4 * MiB


def test_budget_below_two_layers_streams_all_with_two_slots():
    plan = plan_layer_offload([MiB] * 4, 0.9)
    assert plan.streamed == (True,) * 4
    assert plan.gpu_bytes == 2 * MiB > plan.budget_bytes  # at least two layers stay resident


def test_small_fraction_needs_three_streamed_layers():
    plan = plan_layer_offload([MiB] * 10, 0.05)
    # budget 9.5 MiB: one streamed layer (one slot) saves nothing, two (two slots) save nothing,
    # three save one layer: 7 resident + 2 slots = 9 MiB
    assert plan.streamed.count(True) == 3 and plan.streamed_layers == (0, 3, 6)
    assert plan.gpu_bytes == 9 * MiB
    plan = plan_layer_offload([MiB] * 10, 0.0, slots=3)
    assert plan.slots == 3


def test_heterogeneous_sizes_slot_is_largest_streamed():
    plan = plan_layer_offload([3 * MiB, MiB, MiB, MiB], 0.5)
    assert plan.budget_bytes == 3 * MiB
    assert plan.streamed == (True, True, True, True)
    assert plan.slot_bytes == 3 * MiB and plan.gpu_bytes == 6 * MiB


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, True, "0.5"])
def test_bad_fraction(bad):
    with pytest.raises(ValueError, match="param_offload"):
        plan_layer_offload([MiB] * 4, bad)


def test_bad_slots_and_empty():
    with pytest.raises(ValueError, match="slots"):
        plan_layer_offload([MiB] * 4, 0.5, slots=1)
    with pytest.raises(ValueError, match="no layers"):
        plan_layer_offload([], 0.5)


def test_spread():
    assert spread(8, 6) == [0, 1, 2, 4, 5, 6]
    assert spread(8, 4) == [0, 2, 4, 6]
    assert spread(5, 5) == [0, 1, 2, 3, 4]
    assert spread(5, 0) == []


def test_slot_layout_offsets_are_aligned():
    # a bf16 [3, 5] weight (30 B), an fp32 [7] bias (28 B), an fp32 [64, 64] weight (16 KiB)
    pieces, total = slot_layout([30, 28, 16384])
    assert pieces == [TensorSlice(0, 30), TensorSlice(256, 28), TensorSlice(512, 16384)]
    assert total == 512 + 16384


def test_arena_views_share_one_buffer_at_exact_offsets():
    arena = SlotArena(2, 1024, "cpu")
    assert arena.nbytes == 2048
    w = arena.view(1, TensorSlice(256, 4 * 6), torch.float32, (2, 3))
    assert w.shape == (2, 3) and w.dtype == torch.float32
    assert w.data_ptr() - arena.buffer.data_ptr() == 1024 + 256
    arena.raw_view(1, TensorSlice(256, 24), torch.float32, (2, 3)).fill_(7.0)
    assert torch.equal(w, torch.full((2, 3), 7.0)) and w._version == 0
    with pytest.raises(ValueError, match="does not fit"):
        arena.view(0, TensorSlice(1000, 48), torch.float32, (12,))
    with pytest.raises(IndexError):
        arena.view(2, TensorSlice(0, 4), torch.float32, (1,))
    with pytest.raises(ValueError, match="multiple of 256"):
        SlotArena(2, 100, "cpu")


def test_flat_offsets_and_chunks():
    offsets, total = flat_offsets([10, 20, 5])
    assert offsets == [0, 16, 48] and total == 64
    chunks = make_chunks(offsets, [10, 20, 5], 24)
    assert [(c.start, c.end) for c in chunks] == [(0, 24), (24, 48), (48, 53)]
    assert chunks[0].segments == (Segment(0, 0, 10), Segment(1, 16, 24))
    assert chunks[1].segments == (Segment(1, 24, 36),)
    assert chunks[2].segments == (Segment(2, 48, 53),)


def test_merge_runs_skips_params_without_grads_and_splits_on_step():
    segs = (Segment(0, 0, 10), Segment(1, 16, 36), Segment(2, 48, 53))
    assert merge_runs(segs, [True, True, True], [3, 3, 3]) == [(0, 53, 3)]
    assert merge_runs(segs, [True, False, True], [3, 3, 3]) == [(0, 10, 3), (48, 53, 3)]
    assert merge_runs(segs, [True, True, True], [3, 1, 1]) == [(0, 10, 3), (16, 53, 1)]


def test_format_placement_folds_layers():
    rows = [
        {
            "name": f"model.layers.{i}",
            "kind": "layer",
            "param_bytes": MiB,
            "where": "cpu" if i < 3 else "gpu",
            "slot": None,
        }
        for i in range(4)
    ]
    rows.append(
        {
            "name": "(ring slots)",
            "kind": "arena",
            "param_bytes": 2 * MiB,
            "where": "gpu",
            "slot": None,
        }
    )
    text = format_placement(rows)
    lines = text.splitlines()
    assert lines[1].split() == ["model.layers.0..2", "3", "1.00", "cpu"]
    assert lines[2].split() == ["model.layers.3", "1", "1.00", "gpu"]
    assert lines[-1] == "total MiB: gpu 3.00, cpu 3.00, disk 0.00"
