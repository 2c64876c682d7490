"""Summarize a torch.profiler (Kineto) trace: do the offload copies run on their own stream,
and how much of their time overlaps compute?

Reads the Chrome-trace JSON that ``prof.export_chrome_trace(path)`` writes: kernels have
``cat == "kernel"``, copies ``cat == "gpu_memcpy"`` with names such as
``Memcpy DtoH (Device -> Pinned)``; both carry ``args.stream``, ``ts`` and ``dur`` (us).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class CopySummary:
    count: int = 0
    bytes: int = 0
    us: float = 0.0
    overlap_us: float = 0.0
    """Time during which a kernel ran on another stream."""
    streams: set[int] = field(default_factory=set)

    @property
    def overlap(self) -> float:
        return self.overlap_us / self.us if self.us else 0.0

    @property
    def gbps(self) -> float:
        """Achieved throughput while copying (bytes / copy time)."""
        return self.bytes / (self.us * 1e3) if self.us else 0.0


@dataclass
class TraceSummary:
    kernel_us: float
    kernel_streams: set[int]
    d2h: CopySummary
    h2d: CopySummary

    def to_dict(self) -> dict:
        def copy(c: CopySummary) -> dict:
            return {
                "count": c.count,
                "bytes": c.bytes,
                "us": round(c.us, 1),
                "overlap": round(c.overlap, 3),
                "gbps": round(c.gbps, 2),
                "streams": sorted(c.streams),
            }

        return {
            "kernel_us": round(self.kernel_us, 1),
            "kernel_streams": sorted(self.kernel_streams),
            "d2h": copy(self.d2h),
            "h2d": copy(self.h2d),
        }

    def line(self) -> str:
        return (
            f"kernels {self.kernel_us / 1e3:.2f} ms on streams {sorted(self.kernel_streams)}; "
            f"D2H {self.d2h.count} copies {self.d2h.us / 1e3:.2f} ms on {sorted(self.d2h.streams)} "
            f"({self.d2h.overlap:.0%} overlapped, {self.d2h.gbps:.1f} GB/s); "
            f"H2D {self.h2d.count} copies {self.h2d.us / 1e3:.2f} ms on {sorted(self.h2d.streams)} "
            f"({self.h2d.overlap:.0%} overlapped, {self.h2d.gbps:.1f} GB/s)"
        )


def summarize_trace(trace: str | dict) -> TraceSummary:
    """Summarize a Chrome-trace file path or its loaded JSON."""
    if isinstance(trace, str):
        with open(trace) as f:
            trace = json.load(f)
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    kernels: list[tuple[float, float, int]] = []
    copies: list[tuple[str, float, float, int, int]] = []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        args = e.get("args") or {}
        stream = int(args.get("stream", -1))
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        if e.get("cat") == "kernel":
            kernels.append((start, end, stream))
        elif e.get("cat") == "gpu_memcpy":
            name = str(e.get("name", ""))
            kind = "d2h" if "DtoH" in name else "h2d" if "HtoD" in name else ""
            if kind:
                copies.append((kind, start, end, stream, int(args.get("bytes", 0) or 0)))
    d2h, h2d = CopySummary(), CopySummary()
    busy: dict[int, list[tuple[float, float]]] = {}
    for kind, start, end, stream, nbytes in copies:
        s = d2h if kind == "d2h" else h2d
        s.count += 1
        s.bytes += nbytes
        s.us += end - start
        s.streams.add(stream)
        if stream not in busy:
            busy[stream] = _union([(a, b) for a, b, st in kernels if st != stream])
        s.overlap_us += _intersection(start, end, busy[stream])
    kernel_time = sum(b - a for a, b in _union([(a, b) for a, b, _ in kernels]))
    return TraceSummary(kernel_time, {st for _, _, st in kernels}, d2h, h2d)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersection(start: float, end: float, union: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in union)
