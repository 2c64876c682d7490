"""Agreement between ranks (memopt.ranks): gloo, world size 2, one spawn for every check.

Under FSDP2 at world size > 1 each rank plans alone; the plans agree because the ranks agree
on what they are made from: rank 0's device rates, the largest of each measured byte count.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from memopt import ranks


def check_collectives(rank: int) -> None:
    assert ranks.world_size() == 2 and ranks.rank() == rank
    assert ranks.agree_max([1, 5, -7] if rank == 0 else [3, 2, -9]) == [3, 5, -7]
    assert ranks.from_rank0({"rank": rank}) == {"rank": 0}


def check_rates(rank: int) -> None:
    """memopt.optimize's agree_device_rates: only rank 0 calibrates; every rank keeps its
    rates (what a NCCL group on CUDA does, with the CUDA calls stood in for)."""
    from unittest import mock

    from memopt.passes import plan_budget
    from memopt.planner import CPU_DEFAULTS

    calls = []

    def calibrate(device, cache, room=None):
        calls.append(device)
        return CPU_DEFAULTS.__class__(**{**vars(CPU_DEFAULTS), "name": f"rank{rank}"})

    with (
        mock.patch.object(plan_budget, "calibrate", calibrate),
        mock.patch.object(plan_budget, "_AGREED", {}),
        mock.patch("torch.cuda.is_available", lambda: True),
        mock.patch("torch.cuda.current_device", lambda: 0),
        mock.patch("torch.cuda.get_device_name", lambda d=None: "Fake GPU"),
        mock.patch.object(dist, "get_backend", lambda group=None: "cuda:nccl,cpu:gloo"),
    ):
        plan_budget.agree_device_rates()
        assert plan_budget.device_rates(torch.device("cuda", 0)).name == "rank0"
    assert len(calls) == (1 if rank == 0 else 0)


def check_rates_without_optimize(rank: int, tmp: str) -> None:
    """torch.compile(backend="memopt") at world size > 1 (no optimize(), no collective in a
    compile): rank 0 calibrates and publishes its rates in the process group's store, the
    other rank waits for them there. Each rank has its own cache dir (spawn_gloo's)."""
    from unittest import mock

    from memopt.passes import plan_budget
    from memopt.planner import CPU_DEFAULTS, costs

    measured = []

    def measure(dev, sizes):
        measured.append(rank)
        if rank == 0:
            import time

            time.sleep(1.0)  # rank 1 asks before rank 0 has them: it must wait, not measure
        return CPU_DEFAULTS.__class__(**{**vars(CPU_DEFAULTS), "name": f"rank{rank}"})

    with (
        mock.patch.object(costs, "_measure", measure),
        mock.patch.object(costs, "_device_name", lambda dev: "Fake GPU"),
        mock.patch.object(plan_budget, "_AGREED", {}),
        mock.patch.object(plan_budget, "measure_room", lambda device, budget=None: 1 << 40),
        mock.patch("torch.cuda.get_device_name", lambda d=None: "Fake GPU"),
    ):
        rates = plan_budget.device_rates(torch.device("cuda", 0))
        assert plan_budget.device_rates(torch.device("cuda", 0)) is rates  # kept
    assert measured == ([0] if rank == 0 else [])
    assert rates.name == "Fake GPU" and rates.source.startswith(("measured", "cache:"))
    got = ranks.from_rank0(vars(rates))
    assert {**got, "source": ""} == {**vars(rates), "source": ""}  # the same numbers


def check_kernel_times(rank: int, tmp: str) -> None:
    """Kernel times at world size > 1 with a private cache dir per rank: rank 0 times them,
    the other rank takes rank 0's from the store and times none."""
    import os
    from unittest import mock

    from memopt import kernel_times as kt
    from tests.test_kernel_times import _graph, _value

    def time_kernel(node, device, value):
        if rank != 0:
            raise AssertionError("a rank other than 0 timed a kernel")
        import time

        time.sleep(0.5)  # rank 1 asks first
        return 2e-3

    where = os.path.join(tmp, f"kernels-{rank}")
    os.makedirs(where)
    with mock.patch.object(kt, "time_kernel", time_kernel):
        table = kt.measure([_graph()], torch.device("cpu"), _value, where)
    assert len(table) == 4 and set(table.values()) == {2e-3}
    assert ranks.from_rank0(table) == table


def _state(rank: int):
    from memopt.config import resolve_config
    from memopt.state import MemoptState

    state = MemoptState(resolve_config(budget="1GiB"))
    # the decisions are memopt.step's (tests/test_step*.py): here the step is just planned
    state._decide = lambda: setattr(state, "_planned_for", state.last_step)
    return state


def _run_step(state, entries, bwd, probed=None, compiled=False, places=None):
    state._seq, state._backward_seen = list(range(len(entries))), True
    state._entry, state._bwd_entry = list(entries), dict(bwd)
    state._compiled_in_step = compiled
    state._probe = None if probed is None else mock_probe(probed, places)
    state._finish_step()


def mock_probe(peak, places=None):
    from types import SimpleNamespace

    return SimpleNamespace(finish=lambda: peak, places=places, mark=lambda label: None)


def check_step_measurements(rank: int) -> None:
    """The step just done: every rank takes the largest of each measurement; a probe that
    measured on one rank only counts; the agreement stops once the plan has held."""
    from unittest import mock

    from memopt.state import SETTLE_STEPS

    state = _state(rank)
    first = [100, 250, 300] if rank == 0 else [120, 240, 300]
    bwd = {0: 900, 2: 500} if rank == 0 else {0: 880, 1: 700}
    places = [(("forward", 0), 4000), (("forward", 1), 4100), (("backward", 2), 4200)]
    places += [(("backward", 1), 4300), (("backward", 0), 5000)]
    _run_step(state, first, bwd, probed=5000 if rank == 1 else None, places=places)
    assert state._entry_last == (120, 250, 300)
    assert state._bwd_entry_last == {0: 900, 1: 700, 2: 500}
    assert state._probed == 5000 and state._measured  # rank 1's measurement, on both ranks
    assert state._probed_runs == (5000, 4300, 4200)  # and its places, run by run
    assert state._settled == 0  # a measurement: the plan is checked for SETTLE_STEPS steps

    calls = []
    real = ranks.agree_max
    with mock.patch.object(ranks, "agree_max", lambda v: calls.append(v) or real(v)):
        for _ in range(SETTLE_STEPS + 2):
            _run_step(state, first, bwd)
    # two collectives a step (the step's length, then the measurements) while unsettled
    assert len(calls) == 2 * SETTLE_STEPS
    assert state._settled == SETTLE_STEPS + 2

    # a step of another length on one rank: both ranks say so, neither hangs
    state = _state(rank)
    with pytest.raises(RuntimeError, match="ranks ran different steps"):
        _run_step(state, first[: 2 + rank], {})


def _checks(rank: int, tmp: str) -> None:
    check_collectives(rank)
    check_rates(rank)
    check_rates_without_optimize(rank, tmp)
    check_kernel_times(rank, tmp)
    check_step_measurements(rank)


def test_ranks_agree_gloo_world_size_2():
    from tests.helpers import spawn_gloo

    spawn_gloo(_checks)


def test_world_size_1_is_local():
    if dist.is_initialized():
        pytest.skip("a process group exists")
    assert ranks.world_size() == 1 and ranks.rank() == 0
    assert ranks.agree_max([4, 2]) == [4, 2]
    assert ranks.from_rank0("x") == "x"
