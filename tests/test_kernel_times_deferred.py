"""Kernels without room to be timed as a region compiles (a region compiled mid-step under a
byte budget, the step's earlier activations filling it) are timed between steps, and the
step plan prices the region with them (thirty-second session: Whisper's decoder regions on an
H200 were priced by the roofline in every process)."""

from __future__ import annotations

import logging

import torch

import memopt
from memopt import kernel_times as kt
from tests.test_step_regions import X, _model


def _ops(problem):
    rp = problem.problem
    return [*rp.timeline.fwd_op_s, *rp.timeline.bwd_op_s]


def test_kernels_without_room_are_deferred_then_timed(tmp_path):
    g = torch.fx.symbolic_trace(lambda a, b: torch.mm(a, b) + 1.0)
    from torch.fx.passes.shape_prop import ShapeProp

    a, b = torch.randn(64, 32), torch.randn(32, 16)
    ShapeProp(g).propagate(a, b)
    for n in g.graph.nodes:
        if "tensor_meta" in n.meta:  # the fake value memopt reads
            n.meta["val"] = torch.empty(n.meta["tensor_meta"].shape)
    value, cpu, where = int, torch.device("cpu"), str(tmp_path)
    deferred: dict = {}
    assert kt.measure([g], cpu, value, where, room=0, deferred=deferred) == {}
    assert len(deferred) == 1 and next(iter(deferred.values())).target is torch.mm
    assert kt.read_cache(kt.cache_path(cpu, where)) == {}  # not written: timed later
    times = kt.measure_nodes(deferred, cpu, value, where, room=None)
    assert deferred == {} and len(times) == 1 and next(iter(times.values())) > 0
    assert kt.read_cache(kt.cache_path(cpu, where)) == times


def test_a_region_compiled_without_room_is_priced_with_its_kernels_after_the_step(
    monkeypatch, caplog
):
    import memopt.passes.pipeline as pl
    import memopt.passes.plan_budget as pb

    room = {"now": 0}  # no room while the first step compiles; all of it after
    monkeypatch.setattr(pl, "TIMED_DEVICES", frozenset({"cuda", "cpu"}))
    monkeypatch.setattr(pl, "measure_room", lambda device, budget=None: room["now"])
    monkeypatch.setattr(pb, "measure_room", lambda device, budget=None: room["now"])
    model = _model()
    opt = memopt.optimize(model, budget=0.5)
    model.zero_grad()
    opt(X).backward()
    from memopt.api import _STATES

    state = _STATES[opt]
    before = {i: _ops(p) for i, p in state.problems.items()}
    assert state._retimers, "no region deferred its kernels"
    room["now"] = 2**40
    with caplog.at_level(logging.INFO, logger="memopt"):
        for _ in range(2):  # the second step's first run plans the step: its menus
            model.zero_grad()
            opt(X).backward()
    said = [r.getMessage() for r in caplog.records if "re-priced" in r.getMessage()]
    assert said, "no region was re-priced"
    changed = [i for i, p in state.problems.items() if _ops(p) != before[i]]
    assert changed and all(i in state._retimers for i in changed)
    # what a warm compile cache restores is the re-priced problem: the same step plan
    from memopt import report_cache

    for i in changed:
        assert _ops(report_cache.load(state._keys[i])[1]) == _ops(state.problems[i])
    # their kernels' times are in the cache now (none were written while there was no room)
    import os

    from memopt.config import cache_dir

    assert kt.read_cache(kt.cache_path(torch.device("cpu"), os.path.join(cache_dir(), "rates")))
