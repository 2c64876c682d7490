"""Plan strings and the per-layer sync dict the planner emits."""

from __future__ import annotations

import pytest

from memopt.plan import Strategy, parse_plans
from memopt.planner import lead_sync, lead_windows, plan_strings, sync_windows
from memopt.planner.emit import event_to_sync, plan_count, sync_to_event
from memopt.planner.synthetic import LayerTensor, MiB, layered_problem

PROBLEM = layered_problem(
    [LayerTensor("BiasGelu+", MiB, 0), LayerTensor("Reshape+Where+", MiB, 1)],
    n_layers=4,
    ops_per_layer=2,
    fwd_op_s=1e-3,
)


def test_plan_strings_use_first_n_counts() -> None:
    plans = {
        "BiasGelu+": (Strategy.RECOMPUTE, 4),  # all four occurrences -> -1
        "Reshape+Where+": (Strategy.COMPROMISE, 2),
    }
    out = plan_strings(plans, PROBLEM.clusters)
    assert out == ("BiasGelu+:1:-1", "Reshape+Where+:2:2")
    assert [str(p) for p in parse_plans(",".join(out))] == list(out)
    offload = {"Reshape+Where+": (Strategy.OFFLOAD, 3)}
    assert plan_strings(offload, PROBLEM.clusters) == ("Reshape+Where+:3:3",)
    assert plan_strings({"BiasGelu+": (Strategy.KEEP, 0)}, PROBLEM.clusters) == ()


def test_plan_count_skips_missing_occurrences() -> None:
    # A cluster whose occurrence 1 is not a saved activation: the first two candidates are
    # occurrences 0 and 2, so the plan must cover the first 3 occurrences.
    cands = [c for c in PROBLEM.clusters["BiasGelu+"] if c.occurrence != 1]
    assert plan_count(cands, 1) == 1
    assert plan_count(cands, 2) == 3
    assert plan_count(cands, 3) == -1


def test_lead_schedule() -> None:
    # Offload 2 of 4 layers with lead 2: layer i finishes before layer 2+i's forward, reloads
    # when layer 2+i's backward begins (backward-order index 1-i).
    assert lead_sync([0, 1], 2, 4) == {0: (True, 2, False, 1), 1: (True, 3, False, 0)}
    assert lead_sync([0, 1, 2], 1, 4) == {
        0: (True, 1, False, 2),
        1: (True, 2, False, 1),
        2: (True, 3, False, 0),
    }
    with pytest.raises(ValueError):
        lead_sync([3], 1, 4)  # the last layer has no window


def test_lead_sync_and_windows_agree() -> None:
    tl = PROBLEM.timeline
    sync = lead_sync([0, 1], 2, 4)
    windows = sync_windows(sync, tl)
    assert windows == {k: v for k, v in lead_windows(tl, 2).items() if k in (0, 1)}
    # Layer 0 (lead 2): freed when layer 2's forward begins (op 5), back when layer 2's
    # backward begins (backward op 3 = position 10 + 3).
    assert (windows[0].release_pos, windows[0].reload_pos) == (5, 13)
    with pytest.raises(ValueError):
        lead_sync([3], 1, 4)


def test_event_round_trip() -> None:
    for event in range(8):
        assert sync_to_event(*event_to_sync(event, 4), 4) == event
    assert event_to_sync(5, 4) == (False, 1)
