"""benchmarks/diag_waits.py: the chain behind a compute-stream wait, on a hand-made trace."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import diag_waits  # noqa: E402


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


def _trace():
    return [
        _x("cuda_runtime", "cudaLaunchKernel", -10, 2, correlation=1),
        _x("kernel", "k1", 0, 100, tid=7, stream=7, correlation=1),
        _x("python_function", "memopt/offload/step_offload.py(250): _copy_all", 30, 20),
        _x("cuda_runtime", "cudaMemcpyAsync", 40, 2, correlation=2),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            100,
            890,
            tid=20,
            stream=20,
            correlation=2,
        ),
        _x("cuda_runtime", "cudaEventRecord", 45, 1, correlation=4),
        _x("python_function", "fsdp/_fully_shard/x.py(10): wait_for_unshard", 52, 20),
        _x("cuda_runtime", "cudaStreamWaitEvent", 55, 1, correlation=5),
        _x(
            "cuda_sync",
            "Stream Wait Event",
            55,
            1,
            cuda_sync_kind="Stream Wait Event",
            stream=7,
            correlation=5,
            wait_on_stream=20,
            wait_on_cuda_event_record_corr_id=4,
        ),
        _x("cuda_runtime", "cudaLaunchKernel", 60, 2, correlation=3),
        _x("kernel", "k2", 1000, 50, tid=7, stream=7, correlation=3),
    ]


def test_wait_chain_names_the_copy_and_who_queued_it():
    out = diag_waits.analyze(_trace(), min_us=300)
    assert out["wait_us"] == 900
    (w,) = out["waits"]
    assert (w["at_ms"], w["gap_us"], w["kernel"]) == (1.0, 900, "k2")
    first, copy, k1 = w["chain"]
    assert first["waits"] == [
        {
            "queued_ms": 0.055,
            "by": ["fsdp/_fully_shard/x.py(10): wait_for_unshard"],
            "recorded_ms": 0.045,
            "recorded_by": ["memopt/offload/step_offload.py(250): _copy_all"],
            "on": "stream 20 (memcpy HtoD x1)",
            "after": "Memcpy HtoD (Pinned -> Device)",
            "after_end_ms": 0.99,
        }
    ]
    assert first["ended_then"] == [("Memcpy HtoD (Pinned -> Device)", "stream 20 (memcpy HtoD x1)")]
    assert (copy["start_ms"], copy["end_ms"], copy["launched_ms"]) == (0.1, 0.99, 0.04)
    assert copy["ended_then"] == [("k1", "stream 7 (compute)")]
    assert k1 == {
        "op": "k1",
        "stream": "stream 7 (compute)",
        "start_ms": 0.0,
        "end_ms": 0.1,
        "launched_ms": -0.01,
        "prev_on_stream_end_ms": None,
    }


def test_short_or_cpu_bound_gaps_are_not_waits():
    events = _trace()
    assert diag_waits.analyze(events, min_us=1000)["waits"] == []
    for e in events:  # k2 launched right before it ran: the CPU was late, nothing waited
        if e["args"].get("correlation") == 3 and e["cat"] == "cuda_runtime":
            e["ts"] = 990
    assert diag_waits.analyze(events, min_us=300)["waits"] == []


def test_idle_splits_the_compute_streams_gaps_by_cause():
    events = _trace()
    out = diag_waits.idle(events)
    # k1 [0, 100), k2 [1000, 1050): one 900 us gap, k2 queued long before (a GPU wait)
    assert (out["span_ms"], out["busy_ms"], out["host_ms"], out["gpu_wait_ms"]) == (
        1.05,
        0.15,
        0.0,
        0.9,
    )
    assert out["ops"] == 2 and out["gaps"]["<1000us"] == {"n": 1, "ms": 0.9}
    for e in events:  # k2 launched right before it ran: the host was late
        if e["args"].get("correlation") == 3 and e["cat"] == "cuda_runtime":
            e["ts"] = 990
    out = diag_waits.idle(events)
    assert (out["host_ms"], out["gpu_wait_ms"]) == (0.9, 0.0)
