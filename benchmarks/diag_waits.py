"""Why does the compute stream wait? One profiled step, every stream's GPU work, and for each
long wait on the compute stream: the stream-wait calls the host queued before the kernel that
waited (who queued them: the enclosing Python frames), the event each one waited for (the
stream it was recorded on, when the work before it ended), and the GPU work on any stream that
ended when the wait ended, followed back (what that work itself waited for) a few links.

Used by ``diag_step_offload.py --waits``; :func:`analyze` takes a Chrome trace's events
(``torch.profiler`` with CPU + CUDA activities, ``with_stack=True`` and CUDA sync events) and
needs no GPU.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

#: A kernel that started this long after its launch call was queued behind something (us).
QUEUED_US = 30.0
#: GPU work "ended when the wait ended" within this window before the waiting kernel (us).
END_MATCH_US = 40.0
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_RECORD = ("cudaEventRecord", "cudaEventRecordWithFlags")


def profile(step: Callable[[], None], keep: str | None = None) -> list[dict]:
    """Profile one call of ``step``; returns the trace's events (``keep``: also write the
    trace there, gzipped)."""
    import torch

    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    with torch.profiler.profile(activities=acts, with_stack=True, experimental_config=config) as p:
        step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    p.export_chrome_trace(path)
    if keep:
        with open(path, "rb") as src, gzip.open(keep, "wb") as dst:
            shutil.copyfileobj(src, dst)
    with open(path) as f:
        return json.load(f).get("traceEvents", [])


class _Trace:
    def __init__(self, events: Sequence[dict]):
        x = [e for e in events if e.get("ph") == "X" and "dur" in e]
        self.runtime = {}
        for e in x:
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                c = (e.get("args") or {}).get("correlation")
                if c is not None:
                    self.runtime[int(c)] = e
        self.gpu = collections.defaultdict(list)  # stream -> ops by start
        for e in x:
            if e.get("cat") in _GPU_CATS:
                self.gpu[int(e["args"].get("stream", -1))].append(e)
        for ops in self.gpu.values():
            ops.sort(key=lambda e: e["ts"])
        self.syncs = [
            e
            for e in x
            if e.get("cat") == "cuda_sync"
            and (e.get("args") or {}).get("cuda_sync_kind") == "Stream Wait Event"
        ]
        host = [e for e in x if e.get("cat") in ("python_function", "cpu_op", "user_annotation")]
        self.host = collections.defaultdict(list)
        for e in host:
            self.host[e.get("tid")].append(e)
        for evs in self.host.values():
            evs.sort(key=lambda e: e["ts"])
        self.main = max(self.gpu, key=lambda s: sum(e["cat"] == "kernel" for e in self.gpu[s]))
        self.t0 = self.gpu[self.main][0]["ts"] if self.gpu[self.main] else 0.0

    def rel(self, ts: float) -> float:
        return round((ts - self.t0) / 1e3, 3)

    def launch(self, op: dict) -> dict | None:
        return self.runtime.get(int(op["args"].get("correlation", -1)))

    def frames(self, call: dict, n: int = 6) -> list[str]:
        """Innermost host frames enclosing ``call`` (same thread), innermost first."""
        out = [
            e
            for e in self.host.get(call.get("tid"), ())
            if e["ts"] <= call["ts"] and e["ts"] + e["dur"] >= call["ts"] + call["dur"]
        ]
        out.sort(key=lambda e: e["dur"])
        names = []
        for e in out:
            name = e["name"]
            if name.startswith(("<built-in", "torch/_ops.py", "torch/nn/modules/module.py")):
                continue
            names.append(name[:110])
            if len(names) == n:
                break
        return names

    def before(self, stream: int, ts: float) -> dict | None:
        """The last GPU op on ``stream`` launched (host time) before ``ts``."""
        best = None
        for op in self.gpu.get(stream, ()):
            call = self.launch(op)
            if call is not None and call["ts"] <= ts and (best is None or op["ts"] > best["ts"]):
                best = op
        return best

    def label(self, stream: int) -> str:
        names = collections.Counter(
            ("memcpy " + op["name"].split()[1] if op["cat"] == "gpu_memcpy" else op["name"][:24])
            for op in self.gpu.get(stream, ())
        )
        top = ", ".join(f"{n} x{c}" for n, c in names.most_common(2))
        return f"stream {stream} ({'compute' if stream == self.main else top})"

    def ended_at(self, ts: float, skip: int | None = None) -> list[dict]:
        out = []
        for s, ops in self.gpu.items():
            for op in ops:
                end = op["ts"] + op["dur"]
                if ts - END_MATCH_US <= end <= ts + 5 and s != skip:
                    out.append(op)
        return sorted(out, key=lambda o: -(o["ts"] + o["dur"]))

    def waits_queued(self, stream: int, lo: float, hi: float) -> list[dict]:
        """Stream-wait calls for ``stream`` the host made in ``[lo, hi]`` (host time)."""
        out = []
        for e in self.syncs:
            a = e["args"]
            if int(a.get("stream", -1)) != stream:
                continue
            call = self.runtime.get(int(a.get("correlation", -1)), e)
            if lo <= call["ts"] <= hi:
                out.append((call, a))
        return out

    def describe_wait(self, call: dict, args: dict) -> dict:
        rec = self.runtime.get(int(args.get("wait_on_cuda_event_record_corr_id", -1)))
        on = args.get("wait_on_stream")
        row = {"queued_ms": self.rel(call["ts"]), "by": self.frames(call, 5)}
        if rec is not None:
            row["recorded_ms"] = self.rel(rec["ts"])
            row["recorded_by"] = self.frames(rec, 5)
            if on is not None:
                prior = self.before(int(on), rec["ts"])
                row["on"] = self.label(int(on))
                if prior is not None:
                    row["after"] = prior["name"][:60]
                    row["after_end_ms"] = self.rel(prior["ts"] + prior["dur"])
        return row

    def chain(self, op: dict, depth: int) -> list[dict]:
        """``op`` and what it waited behind, a link per GPU op, up to ``depth`` links."""
        out = []
        for _ in range(depth):
            stream = int(op["args"].get("stream", -1))
            call = self.launch(op)
            ops = self.gpu[stream]
            i = ops.index(op)
            prev_end = ops[i - 1]["ts"] + ops[i - 1]["dur"] if i else None
            link = {
                "op": op["name"][:70],
                "stream": self.label(stream),
                "start_ms": self.rel(op["ts"]),
                "end_ms": self.rel(op["ts"] + op["dur"]),
                "launched_ms": self.rel(call["ts"]) if call else None,
                "prev_on_stream_end_ms": self.rel(prev_end) if prev_end is not None else None,
            }
            out.append(link)
            queued = call is not None and op["ts"] - call["ts"] > QUEUED_US
            if not queued or (prev_end is not None and op["ts"] - prev_end < 5):
                break  # it ran as soon as it was launched, or right after its stream's last op
            lo = self.launch(ops[i - 1])["ts"] if i and self.launch(ops[i - 1]) else call["ts"]
            link["waits"] = [
                self.describe_wait(c, a) for c, a in self.waits_queued(stream, lo, call["ts"])
            ]
            blockers = self.ended_at(op["ts"], skip=stream)
            if not blockers:
                break
            link["ended_then"] = [
                (b["name"][:50], self.label(int(b["args"]["stream"]))) for b in blockers[:3]
            ]
            op = blockers[0]
        return out


def analyze(events: Sequence[dict], min_us: float = 300.0, depth: int = 4) -> dict:
    """The compute stream's waits of at least ``min_us``, each with its chain (see module
    docstring), plus each stream's label and busy time."""
    tr = _Trace(events)
    ops = tr.gpu[tr.main]
    out = {"streams": {}, "waits": [], "wait_us": 0.0}
    for s, so in tr.gpu.items():
        out["streams"][tr.label(s)] = round(sum(o["dur"] for o in so) / 1e3, 3)
    for prev, op in zip(ops, ops[1:]):
        gap = op["ts"] - (prev["ts"] + prev["dur"])
        call = tr.launch(op)
        if gap < min_us or call is None or op["ts"] - call["ts"] < QUEUED_US:
            continue
        out["wait_us"] += gap
        row = {"at_ms": tr.rel(op["ts"]), "gap_us": round(gap), "kernel": op["name"][:70]}
        row["chain"] = tr.chain(op, depth)
        out["waits"].append(row)
    out["waits"].sort(key=lambda r: -r["gap_us"])
    return out


#: Upper edges (us) of the gap buckets of :func:`idle`.
GAP_BUCKETS_US = (20.0, 100.0, 300.0, 1000.0, float("inf"))


def idle(events: Sequence[dict]) -> dict:
    """Where the compute stream's time went over the profiled window (one or several steps):
    its span, its busy time (the union of its kernels, copies and memsets) and its idle gaps,
    each gap split by cause. A gap ended by an op that started within ``QUEUED_US`` of its
    launch call waited for the host to launch it (``host_ms``: the launching thread was late);
    any other gap waited on the GPU (``gpu_wait_ms``: a stream wait, another stream's work).
    Gaps are also counted by length (``GAP_BUCKETS_US``)."""
    tr = _Trace(events)
    ops = tr.gpu[tr.main]
    if not ops:
        return {}
    end = ops[0]["ts"] + ops[0]["dur"]
    host = wait = 0.0
    buckets = {f"<{b:g}us": [0, 0.0] for b in GAP_BUCKETS_US}
    for op in ops[1:]:
        gap = op["ts"] - end
        if gap > 0:
            call = tr.launch(op)
            if call is not None and op["ts"] - call["ts"] < QUEUED_US:
                host += gap
            else:
                wait += gap
            key = next(f"<{b:g}us" for b in GAP_BUCKETS_US if gap < b)
            buckets[key][0] += 1
            buckets[key][1] += gap
        end = max(end, op["ts"] + op["dur"])
    span = end - ops[0]["ts"]
    top = {}
    for s, so in tr.gpu.items():  # each stream's heaviest op kinds (memcpys by direction)
        ms = collections.Counter()
        for o in so:
            ms[o["name"] if o["cat"] != "kernel" else o["name"][:40]] += o["dur"] / 1e3
        top[tr.label(s)] = {k: round(v, 3) for k, v in ms.most_common(6)}
    return {
        "top": top,
        "span_ms": round(span / 1e3, 3),
        "busy_ms": round((span - host - wait) / 1e3, 3),
        "host_ms": round(host / 1e3, 3),
        "gpu_wait_ms": round(wait / 1e3, 3),
        "ops": len(ops),
        "gaps": {k: {"n": n, "ms": round(t / 1e3, 3)} for k, (n, t) in buckets.items()},
    }
