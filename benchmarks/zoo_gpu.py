"""The GPU zoo: torch.compile's ``activation_memory_budget`` points against memopt aimed at
the same peaks, on models of benchmarks/zoo_models.py at their GPU sizes.

Per model, every variant runs in its own process (fresh dynamo state, allocator, counters):

* ``torch.compile``, and with ``activation_memory_budget`` in ``--points`` (0.8 0.5 0.3 0.1);
* ``memopt level=1`` and ``memopt offload_layers=k`` (half the repeated layers);
* PyTorch's native activation offload as peers (``--peers``, on by default;
  benchmarks/native_offload.py): ``native offload`` (saved tensors >= 1 MiB of every layer,
  copies on the compute stream), ``native offload, stream`` (a side stream, reloads
  prefetched, no sink wait) and ``checkpoint+offload`` (torchtitan's policy:
  ``activation_memory_budget=0.5``, then the surviving saved tensors >= 1 MiB offloaded); a
  peer that fails to compile or run records its error;
* ``memopt budget=<bytes>`` at each peak torch measured (started once those are known) and
  at each peer's peak (``memopt budget at <peer>``, started once that peer has its row).

Processes compile side by side (``--parallel`` at a time); a batch is timed only when all of
it has compiled, one process after the other, so no compile runs beside a timed step. Per
variant: median step ms over ``--iters`` steps after ``--warmup`` (``common.step_stats``),
``max_memory_allocated`` and ``max_memory_reserved`` (under CUDA graphs memopt aims at torch's
reserved bytes) over those steps, three profiled steps (GPU kernel and host issue ms per step,
``kernel_ms``), the first step's loss, compile seconds; for memopt, the planner's verdict,
predicted peak and plan. A process out of memory while others compile runs again alone. ::

    python benchmarks/zoo_gpu.py --models qwen2,bert --out $OUT             # the H100
    python benchmarks/zoo_gpu.py --models vit --device cpu --size tiny --out /tmp/z   # a check
    python benchmarks/zoo_gpu.py --models vit,resnet --resume docs/data --again --out $OUT
        # the H100: the rows docs/data lacks (peers, memopt at their peaks), compile timed again
    python benchmarks/zoo_gpu.py --models llama,bert --kinds compile,level1 --no-peers \
        --ab exp:MEMOPT_X=1 --out $OUT   # level 1 beside itself under other settings (A/B)
    python benchmarks/zoo_gpu.py --plot docs/data/zoo_gpu_*_2026-11-25.json \
        --png docs/zoo_gpu.png --markdown docs/zoo.md   # tables into docs/zoo.md, the plot
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

POINTS = (0.8, 0.5, 0.3, 0.1)
GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's modes with CUDA graphs
MEMOPT_KINDS = ("level1", "budget")  # the kinds --ab runs again
MEMOPT_LABELS = {"level1": "memopt level=1", "fused": "memopt fuse_loss=True (level 0)",
                 "offload": "memopt offload half the layers"}  # fmt: skip
TAG = "@@zoo_gpu "

from benchmarks.zoo_gpu_report import AGAIN, PEER_LABELS, write_docs  # noqa: E402

#: the peers (kind: benchmarks/native_offload.py's NativeOffload arguments; labels in
#: PEER_LABELS); each tags saved tensors of at least --peer-min-bytes (1 MiB) in every layer
PEERS = {
    "native": {},
    "native_stream": {"separate_stream": True, "prefetch": True},
    "titan": {"memory_budget": 0.5},
}
assert PEERS.keys() == PEER_LABELS.keys()
#: on the CPU (no peak measured) memopt's budget at a peer is this fraction: a check only
CPU_PEER_TARGET = 0.5

# --- one variant, in its own process -------------------------------------------------------


def _emit(kind: str, payload: dict[str, Any]) -> None:
    print(f"{TAG}{kind} {json.dumps(payload)}", flush=True)


def _throughput(inputs: dict[str, Any]) -> tuple[str, int]:
    """What one step processes: tokens of ``input_ids`` for language models, else samples."""
    ids = inputs.get("input_ids")
    if ids is not None:
        return "tokens", int(ids.numel())
    first = next(v for v in inputs.values() if hasattr(v, "shape"))
    return "samples", int(first.shape[0])


def _compile(model, variant: dict[str, Any]):
    import torch

    import memopt

    kind = variant["kind"]
    mode = {"mode": os.environ["ZOO_GPU_MODE"]} if os.environ.get("ZOO_GPU_MODE") else {}
    if kind in ("compile", "torch"):
        if kind == "torch":
            torch._functorch.config.activation_memory_budget = variant["budget"]
        return torch.compile(model, **mode)
    if kind == "offload":
        variant["k"] = _outer_layers(model) // 2
    # fused: the linear layer and its cross-entropy fused, nothing else planned
    settings = {"level1": dict(level=1), "fused": dict(level=0, fuse_loss=True),
                "offload": dict(offload_layers=variant.get("k")),
                "budget": dict(budget=variant.get("target"))}  # fmt: skip
    if kind in settings:
        return memopt.optimize(model, **settings[kind], **mode)
    if kind in PEERS:
        from benchmarks.native_offload import NativeOffload

        # entered for the rest of the process: torch.compile compiles at the first step
        native = NativeOffload(min_bytes=variant["min_bytes"], **PEERS[kind])
        variant["_native"] = native.__enter__()
        return torch.compile(model)
    raise ValueError(kind)


def _outer_layers(model) -> int:
    """Layers as memopt numbers them: the largest container of repeated layers that is not
    inside another (ConvNeXt's 4 stages, not the 9 blocks of its third)."""
    from memopt.api import _layer_containers

    found = _layer_containers(model)
    outer = [n for p, n in found.items() if not any(p.startswith(q + ".") for q in found)]
    return max(outer, default=0)


def _memopt_facts(compiled) -> dict[str, Any]:
    """The report's verdict: feasible, predicted peak and overhead, plans, offloaded bytes."""
    import memopt
    from benchmarks.common import running_plans

    rep = memopt.report(compiled)
    plans = [r.extra["planner"] for r in rep.regions if "planner" in r.extra]
    out: dict[str, Any] = {
        "regions": len(rep.regions),
        "offloaded_bytes": rep.offloaded_bytes(),
        "plan_strings": running_plans(rep) or rep.config.plan_strings(),  # the step runs
    }
    step = rep.step
    if plans:
        # a region compiled for a step plan has no solver verdict of its own: the step's says
        verdicts = [bool(p["feasible"]) for p in plans if "feasible" in p]
        out["feasible"] = all(verdicts) if verdicts else None
        out["predicted_peaks"] = [p.get("predicted_peak") for p in plans]
        out["predicted_overhead_ms"] = sum(1e3 * p.get("predicted_overhead_s", 0) for p in plans)
        out["sync"] = [p.get("sync") for p in plans]
        keys = ("baseline_peak", "min_feasible_peak", "peak_lower_bound", "baseline_step_s")
        out["planner"] = [{k: p.get(k) for k in keys} | {"text": p.get("text")} for p in plans]
    if step is not None:
        out["step_plans"] = step.step_plans
        out["went_back_from"] = step.went_back_from
        out["step_floor_s"] = step.overhead_floor_s  # memopt.step_bounds: no plan costs less
        out["step_measured_peak"] = step.measured_peak
    if step is not None and step.peak is not None:
        out["predicted_peak"] = step.peak
        out["feasible"] = bool(step.feasible) if step.feasible is not None else out.get("feasible")
    elif len(plans) == 1:
        out["predicted_peak"] = plans[0].get("predicted_peak")
    return out


def worker(spec: dict[str, Any]) -> None:
    """Build, compile (the first step), say READY, wait for GO on stdin, time, say RESULT."""
    import torch

    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat

    device, variant = spec["device"], spec["variant"]
    os.environ.update(variant.get("env", {}))  # an A/B variant's settings (--ab)
    from benchmarks.common import memopt_log

    log = memopt_log(width=300)
    _log_to_stderr()  # the child's log: what a step that never finishes did, and when
    with compat.no_compile_caches():  # a cache hit would skip memopt's partitioner
        model, inputs = build(
            BY_NAME[spec["model"]], spec["size"], device, getattr(torch, spec["dtype"])
        )
        compiled = _compile(model, variant)

        def step():
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)  # the same random draws (DiT's label dropout) in every step
            loss = step_loss(compiled(**inputs))
            loss.backward()
            return loss

        t0 = time.perf_counter()
        try:
            loss = float(step().detach().float())
        except torch.OutOfMemoryError as e:
            _emit("OOM", {"error": str(e)[:300]})
            return
        except Exception as e:  # a result (a peer that does not compile), not the runner's
            _emit("ERROR", {"error": _error_text(e)})
            return
        compile_s = time.perf_counter() - t0
        native = variant.get("_native")
        peer = native.facts() if native is not None else {}  # as the first step compiled it
        if device.startswith("cuda"):
            torch.cuda.empty_cache()  # give the GPU back to the processes still compiling
        unit, per_step = _throughput(inputs)
        _emit("READY", {"compile_s": round(compile_s, 1)})
        if sys.stdin.readline().strip() != "GO":
            return
        try:
            ms, peak, warm = _time_steps(step, device, spec["warmup"], spec["iters"])
            kernels = _kernel_ms(step) if device.startswith("cuda") else {}
        except Exception as e:
            _emit("ERROR", {"error": _error_text(e)})
            return
        row = {
            **kernels,
            **({"k": variant["k"]} if "k" in variant else {}),
            "ms": ms,
            "peak": peak,  # "reserved": CUDA graphs' pools too (a replay allocates nothing)
            **({"reserved": torch.cuda.max_memory_reserved()} if device.startswith("cuda") else {}),
            "loss": loss,
            "compile_s": round(compile_s, 1),
            "warmup_s": warm,
            "unit": unit,
            "per_s": per_step / (ms / 1e3),
        }
        if variant["kind"] in PEERS:
            row["native"] = peer
            row["offloaded_bytes"] = peer.get("offloaded_bytes")
        elif variant["kind"] not in ("compile", "torch"):
            row.update(_memopt_facts(compiled))
            row["memopt_log"] = [ln.splitlines()[0] for ln in log[-LOG_LINES:]]
    _emit("RESULT", row)


#: memopt's INFO lines a row keeps (its probes, corrections and step plans), the last ones.
LOG_LINES = 40


def _kernel_ms(step) -> dict[str, float]:
    """GPU kernel ms and host issue ms per step (benchmarks/common.py ``kernel_ms``), after
    the timed steps (the peak is theirs)."""
    from benchmarks.common import kernel_ms

    gpu, host = kernel_ms(step)
    return {"gpu_ms": gpu, "host_ms": host}


def _log_to_stderr() -> None:
    """memopt's INFO lines on stderr, each at its seconds since the process began."""
    import logging

    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[%(relativeCreated)9.0f ms] %(message)s"))
    logging.getLogger("memopt").addHandler(h)


def _time_steps(step, device: str, warmup: int, iters: int) -> tuple[float, int | None, list]:
    """Median step ms and (on CUDA) the peak allocated bytes over the timed steps, and each
    warmup step's seconds (a step plan's recompile shows there; each is also said on stderr,
    the child's log, beside memopt's timed log lines)."""
    import torch

    from benchmarks.common import step_stats

    cuda = device.startswith("cuda")
    warm = []
    for i in range(warmup):
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        warm.append(round(time.perf_counter() - t, 2))
        print(f"zoo_gpu: warmup step {i}: {warm[-1]:.2f} s", file=sys.stderr, flush=True)
    if cuda:
        return (*step_stats(step, warmup=0, iters=iters), warm)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        step()
        times.append(1e3 * (time.perf_counter() - t))
    return sorted(times)[len(times) // 2], None, warm


def _error_text(e: BaseException) -> str:
    """The exception's first line (type and message), then its traceback (also on stderr)."""
    import traceback

    tb = traceback.format_exc()
    print(tb, file=sys.stderr, flush=True)
    root = e  # the cause a backend failure wraps (BackendCompilerFailed, InductorError)
    for _ in range(8):
        inner = getattr(root, "inner_exception", None) or root.__cause__
        if not isinstance(inner, BaseException):
            break
        root = inner
    msg = str(root).strip().splitlines() or [""]
    head = f"{type(e).__name__}: " + (f"{type(root).__name__}: " if root is not e else "")
    return (head + msg[0])[:1500] + "\n" + "\n".join(tb.splitlines()[-12:])[:2500]


# --- the scheduler --------------------------------------------------------------------------


class Child:
    """One variant's process; its tagged stdout lines go to ``events``."""

    def __init__(self, spec: dict[str, Any], env: dict[str, str], logs: Path, events):
        self.spec, self.state, self.info = spec, "compiling", {}
        self.log = logs / f"{spec['model']}_{spec['label'].replace(' ', '_').replace('=', '')}.log"
        cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.log, "w"),
            text=True,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._read, args=(events,), daemon=True).start()

    def _read(self, events) -> None:
        for line in self.proc.stdout:
            if line.startswith(TAG):
                kind, payload = line[len(TAG) :].split(" ", 1)
                events.put((self, kind, json.loads(payload)))
        self.proc.wait()
        events.put((self, "EXIT", {"rc": self.proc.returncode}))

    def send(self, text: str) -> None:
        try:
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-12:])


def _not_run(row: dict[str, Any]) -> bool:
    return str(row.get("error", "")).startswith("not run")


def _variants(points, peers: bool = True, min_bytes: int = 2**20) -> list[dict[str, Any]]:
    out = [{"label": "torch.compile", "kind": "compile"}]
    out += [{"label": f"torch budget={b}", "kind": "torch", "budget": b} for b in points]
    out += [{"label": label, "kind": kind} for kind, label in MEMOPT_LABELS.items()]
    if peers:
        out += [{"label": PEER_LABELS[k], "kind": k, "min_bytes": min_bytes} for k in PEERS]
    return out


class Runner:
    """Runs every variant of ``models``, batch by batch, and writes one JSON per model."""

    def __init__(self, args):
        import torch

        self.args, self.out = args, Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs = Path(args.logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.events: queue.Queue = queue.Queue()
        self.t0 = time.perf_counter()
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "TORCHINDUCTOR_COMPILE_THREADS": str(max(1, (os.cpu_count() or 2) // args.parallel)),
            "ZOO_GPU_MODE": args.mode,  # torch.compile's mode= for every variant
        }
        self.docs: dict[str, dict[str, Any]] = {}
        self.queued: dict[str, set[str]] = collections.defaultdict(set)  # budget labels
        self.todo: collections.deque = collections.deque()
        dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        for name in args.models:
            old = Path(args.resume or "") / f"zoo_gpu_{name}{args.suffix}.json"
            kept = []
            if args.resume and old.exists():  # rows of an earlier run, less those not run
                kept = [r for r in json.loads(old.read_text())["rows"] if not _not_run(r)]
            self.docs[name] = {
                "model": name,
                "size": args.size,
                "dtype": args.dtype,
                "device": dev,
                "torch": torch.__version__,
                "memopt_commit": os.environ.get("MEMOPT_COMMIT"),
                "command": " ".join(sys.argv),
                "mode": args.mode or "default",
                "rows": kept,
            }
            done = {r["variant"] for r in kept}
            if kept and args.again:  # a baseline timed beside the rows this run adds
                self.todo.append(self._spec(name, {"label": AGAIN, "kind": "compile"}))
            for v in _variants(args.points, args.peers, args.peer_min_bytes):
                if args.kinds and v["kind"] not in args.kinds:
                    continue
                for w in [v, *self._ab(v)]:
                    if w["label"] not in done:
                        self.todo.append(self._spec(name, w))
            self._queue_budgets(name)

    def _ab(self, variant: dict[str, Any]) -> list[dict[str, Any]]:
        """The copy of a memopt variant run with ``--ab``'s settings (none without it)."""
        if not self.args.ab or variant["kind"] not in MEMOPT_KINDS:
            return []
        tag, _, pairs = self.args.ab.partition(":")
        env = dict(kv.split("=", 1) for kv in pairs.split(",") if kv)
        return [{**variant, "label": f"{variant['label']} [{tag}]", "env": env, "ab": tag}]

    def _spec(self, name: str, variant: dict[str, Any]) -> dict[str, Any]:
        a = self.args
        return {
            "model": name,
            "label": variant["label"],
            "variant": variant,
            "size": a.size,
            "device": a.device,
            "dtype": a.dtype,
            "warmup": a.warmup,
            "iters": a.iters,
        }

    def save(self, name: str) -> None:
        path = self.out / f"zoo_gpu_{name}{self.args.suffix}.json"
        path.write_text(json.dumps(self.docs[name], indent=1) + "\n")

    def record(self, spec: dict[str, Any], row: dict[str, Any]) -> None:
        name = spec["model"]
        row = {"variant": spec["label"], **spec["variant"], **row}
        if self.args.resume and self.args.again:
            row["resumed"] = True
        self.docs[name]["rows"].append(row)
        print(json.dumps({"model": name, **row})[:600], flush=True)
        self.save(name)
        self._queue_budgets(name)

    def _queue_budgets(self, name: str) -> None:
        """memopt at each torch point's peak, once every torch point has its row, and at each
        peer's peak, once that peer has its row; each budget once."""
        doc = self.docs[name]
        torch_rows = [r for r in doc["rows"] if r["kind"] == "torch"]
        aims = []  # (row, label, at, the target on the CPU where no peak is measured)
        if len(torch_rows) >= len(self.args.points):
            doc["budgets_queued"] = True
            aims += [(r, f"torch {r['budget']}", r["budget"], r["budget"]) for r in torch_rows]
        for r in doc["rows"]:
            if r["kind"] in PEERS and "ms" in r:
                aims.append((r, r["variant"], r["variant"], CPU_PEER_TARGET))
        cpu = self.args.device.startswith("cpu")
        done = {r["variant"] for r in doc["rows"]} | self.queued[name]
        for r, at_label, at, cpu_target in aims:
            if r.get("peak") is None and not cpu:
                continue  # that point failed: no peak to aim at
            if self.args.kinds and "budget" not in self.args.kinds:
                continue
            target = r["peak"] if r.get("peak") is not None else cpu_target
            if getattr(self.args, "mode", "") in GRAPH_MODES and r.get("reserved"):
                target = r["reserved"]  # replays allocate nothing: the pools are what is held
            v = {
                "label": f"memopt budget at {at_label}",
                "kind": "budget",
                "target": target,
                "at": at,
            }
            for w in [v, *self._ab(v)]:  # each A/B row on its own: a resumed run adds those lacking
                if w["label"] not in done:
                    self.queued[name].add(w["label"])
                    self.todo.append(self._spec(name, w))

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def run(self) -> None:
        longest = 0.0  # seconds the last batch took
        while self.todo:
            if self.args.deadline and self.elapsed() + longest > self.args.deadline:
                for spec in self.todo:
                    self.record(spec, {"error": "not run: --deadline reached"})
                break
            solo = self.todo[0].get("solo")
            n = 1 if solo else self.args.parallel
            batch = [self.todo.popleft() for _ in range(min(n, len(self.todo)))]
            t = time.perf_counter()
            self.run_batch(batch)
            longest = time.perf_counter() - t  # the next batch: about as long as this one
        print(f"zoo_gpu: done in {self.elapsed():.0f} s", flush=True)

    def _wait(self, children: list[Child], until: set[str], timeout: float) -> None:
        end = time.perf_counter() + timeout
        while any(c.state not in until for c in children):
            try:
                child, kind, payload = self.events.get(timeout=max(0.1, end - time.perf_counter()))
            except queue.Empty:
                for c in children:
                    if c.state not in until:
                        c.kill()
                        c.state, c.info = (
                            "error",
                            {
                                "error": f"timeout after {timeout:.0f} s",
                                "log_tail": c.tail(),  # its warmup steps, memopt's step plans
                            },
                        )
                return
            if kind == "READY":
                child.state, child.info = "ready", payload
            elif kind == "RESULT":
                child.state, child.info = "done", payload
            elif kind == "OOM":
                child.state, child.info = "oom", payload
            elif kind == "ERROR":
                child.state, child.info = "error", payload
            elif kind == "EXIT" and child.state not in ("done", "oom", "error"):
                err = f"exit {payload['rc']} before a result:\n{child.tail()}"
                child.state, child.info = "error", {"error": err}

    def run_batch(self, batch: list[dict[str, Any]]) -> None:
        children = [Child(s, self.env, self.logs, self.events) for s in batch]
        self._wait(children, {"ready", "oom", "error"}, self.args.compile_timeout)
        for c in children:
            if c.state == "oom" and not c.spec.get("solo"):
                self.todo.appendleft({**c.spec, "solo": True})  # again, with the GPU to itself
                c.kill()
            elif c.state != "ready":
                self.record(c.spec, c.info)
                c.kill()
        for c in children:
            if c.state != "ready":
                continue
            c.send("GO")
            self._wait([c], {"done", "error"}, self.args.step_timeout)
            self.record(c.spec, {**c.info, "compile_s": c.info.get("compile_s")})
            c.kill()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="qwen2,bert")
    p.add_argument("--points", default=",".join(map(str, POINTS)))
    p.add_argument("--size", default="gpu", choices=("tiny", "gpu"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--parallel", type=int, default=8, help="processes compiling at once")
    p.add_argument("--deadline", type=float, default=0.0, help="seconds: no batch starts after")
    p.add_argument("--compile-timeout", type=float, default=400.0)
    # a byte budget may re-plan (recompile) in its warm-up: ResNet compiles for 70-90 s
    p.add_argument("--step-timeout", type=float, default=400.0)
    p.add_argument("--out", default="zoo_gpu_out")
    p.add_argument("--logs", default="/tmp/zoo_gpu_logs")
    p.add_argument("--resume", help="a folder of earlier JSON: run only what they lack")
    p.add_argument("--again", action="store_true", help=f"with --resume: time {AGAIN!r}")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                   help="PyTorch's native activation offload as peers (--no-peers: leave them out)")  # fmt: skip
    p.add_argument("--mode", default="", help="torch.compile's mode= for every variant (memopt's too)")  # fmt: skip
    p.add_argument(
        "--peer-min-bytes",
        type=int,
        default=2**20,
        help="the peers offload saved tensors of at least this many bytes",
    )
    p.add_argument(
        "--kinds",
        default="",
        help="only these variant kinds (compile,torch,level1,offload,budget,...; default all)",
    )
    p.add_argument(
        "--ab",
        default="",
        help="TAG:NAME=VALUE,...: every memopt variant also runs with these environment "
        "settings, labelled '[TAG]'",
    )
    p.add_argument("--suffix", default="", help="appended to zoo_gpu_<model> in file names")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--plot", nargs="*", help="JSON files: write tables and the plot instead")
    p.add_argument("--png", default=str(ROOT / "docs" / "zoo_gpu.png"))
    p.add_argument("--markdown", default=str(ROOT / "docs" / "zoo.md"))
    a = p.parse_args(argv)
    if a.worker:
        worker(json.loads(a.worker))
        return
    if a.plot:
        write_docs(a.plot, a.png, a.markdown)
        return
    a.models = [m for m in a.models.split(",") if m]
    a.points = tuple(float(x) for x in a.points.split(",") if x)
    a.kinds = {k for k in a.kinds.split(",") if k}
    Runner(a).run()


if __name__ == "__main__":
    main()
