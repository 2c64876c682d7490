"""The sync dict ``{layer: (offload_fwd, offload_num, reload_fwd, reload_num)}`` addresses the
model's layers when each layer is compiled as its own region (or one graph runs once per
layer): the step offloads those layers' runs, releases and reloads them where the dict says."""

from __future__ import annotations

import pytest
import torch

import memopt
from memopt.offload.step_offload import StepOffload, sync_schedule
from memopt.offload.sync import SyncError
from tests.test_step_regions import H, _model, _plain, _train

PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7]]  # four layers of two runs each (a block, its resume)


def test_sync_schedule_maps_sync_points_to_runs():
    # layer 0: released as layer 2's forward begins, back as layer 2's backward begins
    # layer 1: released at the end of the forward (the last layer's backward), back at layer 1's
    positions, reload, release = sync_schedule(
        PAIRS, {0: (True, 2, False, 1), 1: (True, 4, False, 2)}
    )
    assert positions == [0, 1, 2, 3]
    assert release == {(True, 4): [0, 1], (False, 7): [2, 3]}
    assert reload == {(False, 5): [0, 1], (False, 3): [2, 3]}
    # a reload in the forward starts as that layer's first run begins
    _, reload, _ = sync_schedule(PAIRS, {0: (True, 1, True, 3)})
    assert reload == {(True, 6): [0, 1]}
    with pytest.raises(SyncError, match=r"sync\[2\]: the reload is scheduled after first use"):
        sync_schedule(PAIRS, {2: (True, 3, False, 3)})
    with pytest.raises(SyncError, match="unknown layer 4; the model has 4 layers"):
        sync_schedule(PAIRS, {4: (True, 3, False, 0)})


def test_release_point_holds_the_device_copy_until_then():
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    off = StepOffload([0], 0, reload_at={(False, 1): [0]}, release_at={(True, 1): [0]})
    with off.run(0, (w, x)):
        y = (x @ w).sin().sum()
    (saved,) = off._groups[0]
    assert saved.t is not None and saved.host is not None  # copied, still held
    off.forward_reached(1)
    assert saved.t is None  # released where the dict said
    off.backward_reached(1)
    assert saved.back is not None  # copied back
    (g,) = torch.autograd.grad(y, w)
    torch.testing.assert_close(g, torch.autograd.grad((x @ w).sin().sum(), w)[0])


def test_sync_dict_across_regions_offloads_the_named_layers():
    from memopt.offload import ops

    grads0, _ = _plain()
    model = _model()
    sync = {0: (True, 2, False, 1), 2: (True, 3, False, 0)}
    opt = memopt.optimize(model, sync=sync, offload_min_bytes=0)
    ops.reset_copy_stats()
    grads, _ = _train(opt, model, steps=3, measure=False)
    for a, b in zip(grads, grads0):
        torch.testing.assert_close(a, b)
    rep = memopt.report(opt)
    step = rep.step
    # layers 0 and 2 (runs 0-1 and 4-5): each saves the block's two (32, H) activations
    assert step.offload_runs == (0, 1, 4, 5)
    assert step.offloaded_bytes == 2 * 2 * 32 * H * 4
    assert step.prefetched == 4  # all four tensors came back at their reload points
    stats = ops.copy_stats()
    assert stats.d2h_bytes == stats.h2d_bytes == 2 * step.offloaded_bytes  # steps 2, 3
    # no region says "nothing offloaded here": the step does it
    assert not any("nothing offloaded here" in w for r in rep.regions for w in r.warnings)


def test_sync_dict_that_cannot_apply_says_which_layer():
    # layer 3's offload cannot finish before its forward has begun: said when optimize() is
    # called (the model's one layer container has 4 layers) ...
    with pytest.raises(SyncError, match=r"sync\[3\]: the offload can never finish"):
        memopt.optimize(_model(), sync={3: (True, 3, False, 0)})
    # ... and by the step, where the layers are the step's repeated runs
    with pytest.raises(SyncError, match=r"sync\[3\]: the offload can never finish"):
        sync_schedule(PAIRS, {3: (True, 3, False, 0)})


def test_copy_back_in_the_backward_is_paced_up_to_the_first_use():
    """A layer's copy-back started 4 runs before its first use goes in 4 shares of about equal
    bytes, one per backward start (one long queue would hold the copy engine)."""
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    off = StepOffload([0], 0, reload_at={(False, 4): [0]})
    with off.run(0, (w, x)):
        y = (x @ w).sin().sin().sin().sin().sum()  # four saved (8, 16) tensors
    group = off._groups[0]
    assert len(group) == 4
    back = []
    for pos in (4, 3, 2, 1):
        off.backward_reached(pos)
        back.append(sum(s.back is not None for s in group))
    assert back == [1, 2, 3, 4]
    assert off._current.prefetched == 4
    (g,) = torch.autograd.grad(y, w)
    ref = torch.autograd.grad((x @ w).sin().sin().sin().sin().sum(), w)[0]
    torch.testing.assert_close(g, ref)
