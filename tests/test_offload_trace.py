"""summarize_trace on a synthetic Kineto trace (exact microseconds)."""

from memopt.offload.trace import summarize_trace


def _ev(cat, name, ts, dur, stream, nbytes=None):
    args = {"stream": stream}
    if nbytes is not None:
        args["bytes"] = nbytes
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


def test_copies_on_side_stream_overlapping_kernels():
    trace = {
        "traceEvents": [
            _ev("kernel", "gemm", 0, 100, 7),
            _ev("kernel", "gemm", 150, 100, 7),
            _ev("kernel", "on_copy_stream", 400, 10, 20),  # same stream: not compute overlap
            _ev("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 50, 100, 20, 4_000_000),
            _ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 240, 20, 20, 1_000_000),
            _ev("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 0, 5, 7),
            {"ph": "i", "name": "marker", "ts": 1},
        ]
    }
    s = summarize_trace(trace)
    assert s.kernel_us == 210 and s.kernel_streams == {7, 20}
    assert (s.d2h.count, s.d2h.us, s.d2h.overlap_us, s.d2h.streams) == (1, 100, 50, {20})
    assert s.d2h.overlap == 0.5 and s.d2h.gbps == 40.0
    assert (s.h2d.count, s.h2d.us, s.h2d.overlap_us) == (1, 20, 10)
    assert s.to_dict()["d2h"] == {
        "count": 1,
        "bytes": 4_000_000,
        "us": 100.0,
        "overlap": 0.5,
        "gbps": 40.0,
        "streams": [20],
    }
    assert "D2H 1 copies 0.10 ms on [20] (50% overlapped, 40.0 GB/s)" in s.line()
