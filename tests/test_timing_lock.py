"""memopt.timing_lock: processes sharing a cache dir measure one at a time, and one that
waited takes what the other measured (the same kernel times and device rates for both)."""

from __future__ import annotations

import fcntl
import json
import logging
import multiprocessing as mp
import os
import time

import pytest
import torch

from memopt import kernel_times as kt
from memopt import timing_lock
from memopt.planner import costs

CPU = torch.device("cpu")
#: Seconds each fake kernel timing takes: long enough that two processes released together
#: by a barrier both start timing before either has written its cache (without the lock).
TIMING_S = 0.3


def _child(cache_dir: str, out: str, barrier) -> None:
    """Time the kernels of test_kernel_times' graph into ``cache_dir``, each timing slowed to
    :data:`TIMING_S`; write what was timed, when, and the table to ``out``."""
    from tests.test_kernel_times import _graph, _value

    spans, timed = [], []

    def slow(node, device, value):
        t0 = time.time()
        time.sleep(TIMING_S)
        spans.append((t0, time.time()))
        timed.append(str(node.target))
        return 1e-3 * (1 + len(timed))  # each process's own numbers

    kt.time_kernel = slow
    g = _graph()
    barrier.wait()
    table = kt.measure([g], CPU, _value, cache_dir)
    with open(out, "w") as f:
        json.dump({"spans": spans, "timed": timed, "table": table}, f)


def test_two_processes_time_one_after_the_other_and_plan_with_the_same_times(tmp_path):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    outs = [tmp_path / f"out{i}.json" for i in range(2)]
    procs = [
        ctx.Process(target=_child, args=(str(tmp_path / "cache"), str(o), barrier)) for o in outs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    got = [json.loads(o.read_text()) for o in outs]
    # one process timed the graph's four kernels; the other waited, then read them all
    assert sorted(len(g["timed"]) for g in got) == [0, 4]
    assert got[0]["table"] == got[1]["table"]
    assert sorted(got[0]["table"].values()) == [2e-3, 3e-3, 4e-3, 5e-3]
    assert (tmp_path / "cache" / timing_lock.NAME).exists()


def test_a_calibration_that_waited_takes_the_rates_another_process_wrote(tmp_path, monkeypatch):
    written = costs.H100_DEFAULTS

    def other_process_calibrates(path, what):  # while this one waits for the lock
        assert what == "calibrating NVIDIA Fake"
        costs._write_cache(rates_path, written)
        return None, 1.5

    def measure(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(costs, "_device_name", lambda dev: "NVIDIA Fake")
    monkeypatch.setattr(costs, "_measure", measure)
    monkeypatch.setattr(timing_lock, "_acquire", other_process_calibrates)
    slug = f"NVIDIA-Fake-torch{torch.__version__}".replace("+", "-").replace(".", "-")
    rates_path = str(tmp_path / f"rates-{slug}.json")
    rates = costs.calibrate("cuda", tmp_path)
    assert rates.source == f"cache:{rates_path}"
    assert rates.matmul_flops_per_s == written.matmul_flops_per_s
    assert rates.h2d_bytes_per_s == written.h2d_bytes_per_s


def test_a_lock_held_too_long_is_measured_beside_and_said_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(timing_lock, "WAIT_S", 0.3)
    path = timing_lock.lock_path(tmp_path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: blocks this process's lock too
    try:
        with caplog.at_level(logging.INFO, logger="memopt"):
            for _ in range(2):
                t0 = time.perf_counter()
                with timing_lock.held(tmp_path, "kernel times") as waited:
                    assert waited >= 0.3
                assert time.perf_counter() - t0 < 5
    finally:
        os.close(fd)
    said = [r.getMessage() for r in caplog.records if "measured beside it" in r.getMessage()]
    assert len(said) == 1 and "kernel times is measured beside it" in said[0]
    assert any("another process is measuring on this host; waiting" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_the_lock_is_reentrant_and_released(tmp_path):
    with timing_lock.held(tmp_path, "outer") as w1:
        with timing_lock.held(tmp_path, "inner") as w2:  # does not wait for itself
            assert w1 < 0.1 and w2 == 0.0
        fd = os.open(timing_lock.lock_path(tmp_path), os.O_RDWR)
        with pytest.raises(BlockingIOError):  # still held by the outer one
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
    os.close(fd)
    with timing_lock.held(None, "no cache dir") as w:  # nothing to lock
        assert w == 0.0
