"""The synchronization dict: defaults, validation and the event schedule (plain data)."""

import pytest

from memopt.config import resolve_config
from memopt.offload.sync import (
    Event,
    SyncError,
    SyncPoint,
    build_schedule,
    default_sync,
)


def test_default_sync_n5_k2():
    assert default_sync(5, 2) == {0: (True, 3, False, 2), 1: (True, 4, False, 1)}


def test_default_sync_n9_k3():
    assert default_sync(9, 3) == {
        0: (True, 6, False, 3),
        1: (True, 7, False, 2),
        2: (True, 8, False, 1),
    }


def test_default_sync_edges():
    assert default_sync(4, 0) == {}
    assert default_sync(4, 3) == {
        0: (True, 1, False, 3),
        1: (True, 2, False, 2),
        2: (True, 3, False, 1),
    }
    with pytest.raises(SyncError, match="at most 3"):
        default_sync(4, 4)
    with pytest.raises(SyncError, match="at least one layer"):
        default_sync(0, 0)
    with pytest.raises(SyncError, match="int >= 0"):
        default_sync(4, -1)


@pytest.mark.parametrize("n", range(1, 12))
def test_every_default_validates(n):
    for k in range(n):
        sched = build_schedule(default_sync(n, k), n)
        assert sched.offloaded() == tuple(range(k))
        assert sched.as_dict() == default_sync(n, k)


def test_sync_points_on_one_timeline():
    n = 5
    assert SyncPoint(True, 0).order(n) == 0
    assert SyncPoint(True, 5).order(n) == 5  # end of the forward
    assert SyncPoint(False, 0).order(n) == 6  # start of the backward (layer 4)
    assert SyncPoint(False, 2).layer(n) == 2
    assert SyncPoint(False, 0).layer(n) == 4
    assert SyncPoint(True, 5).layer(n) is None
    assert SyncPoint(True, 3).describe(n) == "the start of layer 3's forward"
    assert SyncPoint(False, 5).describe(n) == "the end of the backward"


def test_events_offloads_in_forward_order_reloads_in_reverse():
    # Two layers finish at the same point and two reload at the same point.
    sync = {0: (True, 3, False, 2), 1: (True, 3, False, 2), 2: (True, 4, False, 1)}
    events = build_schedule(sync, 5).events()
    assert events == [
        Event(SyncPoint(True, 3), "offload_done", 0),
        Event(SyncPoint(True, 3), "offload_done", 1),
        Event(SyncPoint(True, 4), "offload_done", 2),
        Event(SyncPoint(False, 1), "reload_start", 2),
        Event(SyncPoint(False, 2), "reload_start", 1),
        Event(SyncPoint(False, 2), "reload_start", 0),
    ]


def test_first_use_and_reload_done():
    sched = build_schedule({0: (True, 3, False, 2), 1: (True, 2, True, 4)}, 5)
    assert sched.first_use(0) == SyncPoint(False, 4)
    assert sched.reload_done(0) == SyncPoint(False, 4)
    assert sched.reload_done(1) == SyncPoint(True, 5)  # reloaded within the forward


@pytest.mark.parametrize(
    "sync, message",
    [
        ({5: (True, 5, False, 0)}, r"sync: unknown layer 5; the model has 5 layers \(0\.\.4\)"),
        ({-1: (True, 3, False, 2)}, r"unknown layer -1"),
        ({"a": (True, 3, False, 2)}, r"key 'a' is not a layer index"),
        ({0: (True, 3, False)}, r"sync\[0\]=.*expected \(offload_fwd, offload_num"),
        ({0: (1, 3, False, 2)}, r"offload_fwd and reload_fwd must be bools"),
        ({0: (True, 6, False, 2)}, r"offload_num=6 must be an int in 0\.\.5"),
        ({0: (True, 3, False, True)}, r"reload_num=True must be an int"),
        # layer 2's activations only exist once its forward began: finishing at its start
        (
            {2: (True, 2, False, 2)},
            r"sync\[2\]: the offload can never finish at the start of layer 2's forward",
        ),
        # offload finishing in the backward after layer 1's backward began (bw count 4 > 3)
        ({1: (False, 4, False, 4)}, r"sync\[1\]: the offload can never finish in time"),
        # reload after first use: layer 0's backward starts at bw count 4, layer 3's at 1
        ({3: (True, 4, False, 2)}, r"sync\[3\]: the reload is scheduled after first use"),
        (
            {0: (True, 4, False, 5)},
            r"reload is scheduled after first use: it starts at the end of the backward",
        ),
        # reload before the offload finished
        (
            {0: (True, 4, True, 2)},
            r"sync\[0\]: the reload starts at the start of layer 2's forward, before the offload finishes",
        ),
        (
            {0: (False, 2, False, 1)},
            r"before the offload finishes at the start of layer 2's backward",
        ),
    ],
)
def test_validation_errors(sync, message):
    with pytest.raises(SyncError, match=message):
        build_schedule(sync, 5)


def test_valid_unusual_entries():
    # offload finishing in the backward, reload in the forward, reload at the first use
    sched = build_schedule(
        {0: (False, 0, False, 4), 1: (True, 2, True, 4), 3: (True, 4, False, 1)}, 5
    )
    assert sched.get(0).offload_done == SyncPoint(False, 0)
    assert sched.get(1).reload_start == SyncPoint(True, 4)
    assert sched.get(2) is None


def test_config_sync_round_trip():
    cfg = resolve_config(sync={1: (True, 4, False, 1), 0: [True, 3, False, 2]})
    assert cfg.sync == ((0, (True, 3, False, 2)), (1, (True, 4, False, 1)))
    assert build_schedule(dict(cfg.sync), 5).as_dict() == default_sync(5, 2)
