"""Compile-time cost of memopt and of its budget planner, against torch.compile's compile time.

For each model (Hugging Face configs, bf16): the first training step (forward + backward, so
compile + run) of plain ``torch.compile``, of ``memopt.optimize(level=0)`` (memopt's analysis,
no plan) and of ``memopt.optimize(budget=0.5)`` (analysis + budget planner). Each variant runs
in its own process with empty Inductor and Triton caches (``fx_graph_cache`` and
``enable_autograd_cache`` off): every compile is real. A tiny warm-up compile first takes the
one-time costs (imports, compile workers, CUDA context); the planner's device calibration is
done once beforehand and cached (its one-time cost is reported apart).

Compile time = first step - median of 3 later steps. memopt's own time comes from timers
around its entry points (the partitioner, each pass, the planner's problem building and
solver) and from ``memopt.report(compiled).regions[i].plan_seconds`` (the whole pass
pipeline). Shares are of the plain torch.compile compile time of the same model; the target is
the planner (``plan_budget``) under 10%.

    # on the GPU (H100): one run per model, ~4 min each (3 fresh processes, one compile each)
    python benchmarks/plan_time.py --models llama --out plan_time_llama.json
    python benchmarks/plan_time.py --models gpt2 --out plan_time_gpt2.json
    python benchmarks/plan_time.py --table plan_time_llama.json plan_time_gpt2.json
    python benchmarks/plan_time.py --smoke        # CPU check: tiny models (~5 min on 2 cores)
    # CPU: the planner alone (trace once, solve at each budget; CPU seconds per phase)
    python benchmarks/plan_time.py --planner llama:8:2048 llama:4:2048 gpt2:8:1024 llama-7b:8:2048
    python benchmarks/plan_time.py --planner mistral:2:2048 --budgets 0.5 --menu   # + step menu
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))

# name: (kind, layers, hidden, batch, seq), as in pareto.py
CONFIGS = {"llama": ("llama", 8, 2048, 4, 2048), "gpt2": ("gpt2", 12, 768, 8, 1024)}
SMOKE = {"llama": ("llama", 2, 128, 2, 32), "gpt2": ("gpt2", 2, 64, 2, 32)}
VARIANTS = ("compile", "memopt-level0", "memopt-budget-0.5")
TARGET = 0.10  # the planner adds under 10% of torch.compile's compile time


# --- worker: one variant, in a fresh process -----------------------------------------------
class Timers:
    """Wall-clock seconds of wrapped functions, summed per name (nested timers overlap)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, list[float]] = {}

    def add(self, name: str, dt: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + dt
        self.calls.setdefault(name, []).append(dt)

    def wrap(self, owner, attr: str, name: str, static: bool = False) -> None:
        fn = owner.__dict__[attr].__func__ if static else getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t0)

        setattr(owner, attr, staticmethod(timed) if static else timed)

    def install(self) -> None:
        import torch._inductor.compile_fx as inductor_fx

        from memopt import _torch_compat as compat
        from memopt.partitioner import MemoptPartitioner
        from memopt.passes import pipeline
        from memopt.passes import plan_budget as pb
        from memopt.report import RegionReport

        self.wrap(inductor_fx, "min_cut_rematerialization_partition", "torch_partition")
        self.wrap(MemoptPartitioner, "__call__", "memopt_partitioner")
        self.wrap(compat, "min_cut_partition", "min_cut")
        self.wrap(pipeline, "detect_layers_pass", "pass:detect_layers")
        self.wrap(pipeline, "plan_budget", "plan_budget")
        self.wrap(pipeline, "decide", "decide")
        self.wrap(pipeline, "offload_step", "offload_step")
        self.wrap(pb, "device_rates", "plan_budget.device_rates")
        self.wrap(pb, "build_planning_problem", "plan_budget.build_problem")
        self.wrap(pb, "resolve_budget", "plan_budget.resolve_budget")
        self.wrap(pb, "solve", "plan_budget.solve")
        self.wrap(RegionReport, "from_pipeline", "region_report", static=True)
        run = pipeline._Step.run

        def timed_run(step, name, fn, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return run(step, name, fn, *args, **kwargs)
            finally:
                self.add(f"pass:{name}", time.perf_counter() - t0)

        pipeline._Step.run = timed_run

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def make(model: torch.nn.Module, variant: str):
    import memopt

    if variant == "compile":
        return torch.compile(model)
    if variant.startswith("memopt-level"):
        return memopt.optimize(model, level=int(variant.removeprefix("memopt-level")))
    if variant.startswith("memopt-budget-"):
        return memopt.optimize(model, budget=float(variant.removeprefix("memopt-budget-")))
    raise ValueError(f"unknown variant {variant!r}")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def worker(model_name: str, variant: str, smoke: bool) -> dict:
    import torch._dynamo.utils
    from common import hf_model

    import memopt

    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    kind, layers, hidden, batch, seq = (SMOKE if smoke else CONFIGS)[model_name]
    timers = Timers()
    timers.install()

    # warm-up: imports, compile workers, CUDA/Triton init, memopt's code paths (other shapes)
    t0 = time.perf_counter()
    tiny = torch.nn.Sequential(
        torch.nn.Linear(96, 160), torch.nn.GELU(), torch.nn.Linear(160, 96)
    ).to(device=device, dtype=torch.bfloat16)
    x = torch.randn(24, 96, device=device, dtype=torch.bfloat16)
    make(tiny, variant)(x).float().square().mean().backward()
    _sync(device)
    warmup_s = time.perf_counter() - t0
    del tiny, x
    torch._dynamo.reset()

    torch.manual_seed(0)
    with torch.device(device):  # initialize on the device: faster than on the host
        model = hf_model(kind, layers, hidden, device=device)
    if getattr(model, "loss_type", "") is None:
        model.loss_type = "ForCausalLM"  # avoids a graph break in transformers
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=device)
    compiled = make(model, variant)
    timers.reset()
    metrics = getattr(torch._dynamo.utils, "compilation_time_metrics", {})
    metrics.clear()

    def step():
        model.zero_grad(set_to_none=True)
        compiled(input_ids=ids, labels=ids).loss.backward()
        _sync(device)

    _sync(device)
    t0 = time.perf_counter()
    step()
    first_s = time.perf_counter() - t0
    first_timers = dict(timers.seconds)
    steady = []
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        steady.append(time.perf_counter() - t0)
    step_s = statistics.median(steady)
    out = {
        "model": model_name,
        "variant": variant,
        "config": [kind, layers, hidden, batch, seq],
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "memopt": memopt.__version__,
        "warmup_s": warmup_s,
        "first_step_s": first_s,
        "step_s": step_s,
        "compile_s": first_s - step_s,
        "timers": first_timers,
        "timer_calls": {k: v for k, v in timers.calls.items()},
        "dynamo": {k: sum(v) for k, v in metrics.items() if len(v) > 0},
    }
    if variant.startswith("memopt"):
        rep = memopt.report(compiled).to_dict()
        regions = rep["regions"]
        out["regions"] = len(regions)
        out["plan_seconds"] = sum(r["plan_seconds"] for r in regions)
        # per-pass times, once the report carries them (see the note in the final table)
        passes = [r.get("pass_seconds") or r["extra"].get("pass_seconds") for r in regions]
        if any(passes):
            out["report_pass_seconds"] = passes
        planner = [r["extra"]["planner"] for r in regions if "planner" in r["extra"]]
        if planner:
            out["planner"] = [
                {k: p[k] for k in ("feasible", "budget_bytes", "predicted_peak", "exact")}
                for p in planner
            ]
    return out


# --- CPU: the planner alone, at several budgets ---------------------------------------------
#: hf: overrides that build benchmarks/common.py's models through ``memopt plan``'s path.
HF = {
    "llama": "hidden_size=2048 intermediate_size=5440 num_hidden_layers=8 num_attention_heads=16 "
    "num_key_value_heads=16 vocab_size=32000 max_position_embeddings=4096",
    "gpt2": "n_layer=12 n_embd=768 n_head=12 vocab_size=32000 n_positions=4096",
    "llama-7b": "",  # transformers' LlamaConfig defaults: 32 layers, 6.7B parameters
    "mistral": "hidden_size=4096 intermediate_size=14336 num_hidden_layers=4 "
    "num_attention_heads=32 num_key_value_heads=8 vocab_size=32000 max_position_embeddings=4096",
    "qwen2": "hidden_size=1536 intermediate_size=8960 num_hidden_layers=4 num_attention_heads=12 "
    "num_key_value_heads=2 vocab_size=151936 max_position_embeddings=4096",  # the GPU zoo's
}
BUDGETS = ("0.8", "0.5", "0.3", "0.1", "3GiB", "5GiB", "8GiB")


def planner_rows(
    model: str, batch: int, seq: int, budgets: list[str], menu: bool = False
) -> list[dict]:
    """Trace ``hf:<model>`` as ``memopt plan --budget`` does (fake tensors, static shapes),
    keep the planning problem, then solve it at each budget. CPU seconds throughout.
    ``menu``: also the step planner's menu of the region (``memopt.step.region_menu``, budget
    ``step menu``: its smallest peak and the options in ``options``)."""
    from memopt.cli import models
    from memopt.cli.analyze import Request, analyze
    from memopt.config import parse_budget, resolve_config
    from memopt.passes import plan_budget as pb
    from memopt.planner import resolve_budget, solve

    kept: dict = {}
    build, real_solve = pb.build_planning_problem, pb.solve

    def timed_build(*args, **kwargs):
        t0 = time.process_time()
        kept["problem"] = build(*args, **kwargs)
        kept["build_s"] = time.process_time() - t0
        return kept["problem"]

    def first_solve(problem, budget, rates, **kwargs):
        kept["rates"] = rates
        t0 = time.process_time()
        out = real_solve(problem, budget, rates, **kwargs)
        kept["solve_s"] = time.process_time() - t0
        return out

    pb.build_planning_problem, pb.solve = timed_build, first_solve
    source = models.resolve(
        f"hf:{model.split('-')[0]}", models.split_overrides(HF[model].split())[0]
    )
    request = Request(batch=batch, seq=seq, dtype=torch.bfloat16, depth="full", symbolic=False)
    t0 = time.process_time()
    analyze(source, request, [resolve_config(level=0, budget=0.5)])
    trace_s = time.process_time() - t0
    pb.build_planning_problem, pb.solve = build, real_solve
    problem, rates = kept["problem"], kept["rates"]
    rows = []
    for b in budgets:
        budget = resolve_budget(parse_budget("budget", b), problem)
        t0 = time.process_time()
        sol = solve(problem, budget, rates)
        rows.append(
            {
                "model": model,
                "batch": batch,
                "seq": seq,
                "candidates": len(problem.candidates),
                "budget": b,
                "budget_bytes": budget,
                "trace_s": trace_s - kept["build_s"] - kept["solve_s"],
                "build_s": kept["build_s"],
                "solve_s": time.process_time() - t0,
                "feasible": sol.feasible,
                "predicted_peak": sol.predicted_peak,
                "peak_lower_bound": sol.peak_lower_bound,
                "predicted_overhead_s": sol.predicted_overhead_s,
                "plan_strings": list(sol.plan_strings),
            }
        )
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "plan_strings"}), flush=True)
    if menu:
        from memopt.step import region_menu

        t0 = time.process_time()
        opts = region_menu(problem, rates)
        low = min(opts, key=lambda o: o.peak)
        rows.append({**rows[-1], "budget": "step menu", "solve_s": time.process_time() - t0,
                     "feasible": True, "predicted_peak": low.peak, "plan_strings": [],
                     "predicted_overhead_s": low.overhead_s,
                     "options": [(o.label, o.peak, o.saved, o.overhead_s) for o in opts]})  # fmt: skip
        print(json.dumps({k: rows[-1][k] for k in ("model", "budget", "solve_s")}), flush=True)
    return rows


def planner_table(rows: list[dict]) -> str:
    out = [
        "| model | batch x seq | budget | trace / build s | solve s | answer | peak GiB | "
        "overhead ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        answer = "fits" if r["feasible"] else "INFEASIBLE"
        out.append(
            f"| {r['model']} | {r['batch']} x {r['seq']} | {r['budget']} | "
            f"{r['trace_s']:.1f} / {r['build_s']:.2f} | {r['solve_s']:.2f} | {answer} | "
            f"{r['predicted_peak'] / 2**30:.3f} | {r['predicted_overhead_s'] * 1e3:.3f} |"
        )
    return "\n".join(out)


# --- parent: one process per (model, variant) ------------------------------------------------
def run_worker(model_name: str, variant: str, smoke: bool, timeout: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="plan_time-")
    env = dict(os.environ)
    env.update(
        TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
        TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
        TORCHINDUCTOR_FX_GRAPH_CACHE="0",
        TORCHINDUCTOR_AUTOGRAD_CACHE="0",
    )
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model_name, variant]
    cmd += ["--smoke"] if smoke else []
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": model_name, "variant": variant, "error": f"timeout after {timeout} s"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            result = json.loads(line.removeprefix("RESULT "))
            result["process_s"] = time.perf_counter() - t0
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"model": model_name, "variant": variant, "error": " | ".join(tail)[-600:]}


def calibration_seconds() -> float | None:
    """The planner's one-time device calibration (cached afterwards), done up front."""
    if not torch.cuda.is_available():
        return None
    from memopt.passes.plan_budget import device_rates

    t0 = time.perf_counter()
    device_rates(torch.device("cuda"))
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return time.perf_counter() - t0


def shares(rows: list[dict]) -> list[dict]:
    """Per memopt row: its times as fractions of torch.compile's compile time (same model)."""
    base = {r["model"]: r for r in rows if r["variant"] == "compile" and "error" not in r}
    out = []
    for r in rows:
        if "error" in r or r["variant"] == "compile" or r["model"] not in base:
            continue
        b, t = base[r["model"]], r["timers"]
        c = b["compile_s"]
        baseline_cut = (r["timer_calls"].get("min_cut") or [0.0])[0]
        partitioner = t.get("memopt_partitioner", 0.0)
        out.append(
            {
                "model": r["model"],
                "variant": r["variant"],
                "torch_compile_s": c,
                "planner_s": t.get("plan_budget", 0.0),
                "solve_s": t.get("plan_budget.solve", 0.0),
                "build_problem_s": t.get("plan_budget.build_problem", 0.0),
                "pipeline_s": r.get("plan_seconds", 0.0),
                "partitioner_s": partitioner,
                "added_s": partitioner - baseline_cut,
                "planner_share": t.get("plan_budget", 0.0) / c,
                "pipeline_share": r.get("plan_seconds", 0.0) / c,
                "added_share": (partitioner - baseline_cut) / c,
                "first_step_delta_share": (r["first_step_s"] - b["first_step_s"]) / c,
            }
        )
    return out


def table(data: dict) -> str:
    rows = median_rows(data["rows"])
    meta = data.get("meta", {})
    head = f"{meta.get('device')}, torch {meta.get('torch')}" + (
        " [SMOKE: tiny models]" if meta.get("smoke") else ""
    )
    out = [head, ""]
    if meta.get("calibration_s") is not None:
        out += [f"planner device calibration (one-time, cached): {meta['calibration_s']:.1f} s", ""]
    out += [
        "| model | variant | first step s | compile s | memopt partitioner s | "
        "pass pipeline s | planner s (build + solve) | torch partition s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cfg = r.get("config") or [r["model"]]
        name = (
            f"{r['model']} {' x '.join(str(x) for x in cfg[3:])}" if "config" in r else r["model"]
        )
        if "error" in r:
            out.append(f"| {name} | {r['variant']} | error: {r['error'][:120]} | | | | | |")
            continue
        t = r["timers"]
        memo = r["variant"].startswith("memopt")
        planner = (
            f"{t['plan_budget']:.2f} ({t.get('plan_budget.build_problem', 0):.2f} + "
            f"{t.get('plan_budget.solve', 0):.2f})"
            if "plan_budget" in t
            else "—"
        )
        out.append(
            f"| {name} | {r['variant']} | {r['first_step_s']:.1f} | {r['compile_s']:.1f} | "
            f"{t.get('memopt_partitioner', 0):.2f} | "
            f"{r.get('plan_seconds', 0):.2f} | {planner} | "
            "— |"
            if memo
            else f"| {name} | {r['variant']} | {r['first_step_s']:.1f} | {r['compile_s']:.1f} | "
            f"— | — | — | {t.get('torch_partition', 0):.2f} |"
        )
    sh = shares(rows)
    out += [
        "",
        "| model | variant | planner / compile | pass pipeline / compile | "
        "memopt added / compile | first step - compile's, / compile |",
        "|---|---|---|---|---|---|",
    ]
    for s in sh:
        out.append(
            f"| {s['model']} | {s['variant']} | {100 * s['planner_share']:.1f}% | "
            f"{100 * s['pipeline_share']:.1f}% | {100 * s['added_share']:.1f}% | "
            f"{100 * s['first_step_delta_share']:+.1f}% |"
        )
    out += [
        "",
        "compile = first step - median later step; planner = plan_budget (problem building, "
        "budget resolution, solver); pass pipeline = report plan_seconds (baseline partition, "
        "passes, planner, final partition); memopt added = memopt's partitioner - the baseline "
        "min-cut partition that torch.compile runs anyway.",
        "",
        f"Target: the budget planner adds under {100 * TARGET:.0f}% to torch.compile's compile "
        "time.",
    ]
    for s in sh:
        if s["variant"].startswith("memopt-budget"):
            ok = s["planner_share"] < TARGET
            out.append(
                f"- {s['model']}: planner {s['planner_s']:.2f} s = "
                f"{100 * s['planner_share']:.1f}% of {s['torch_compile_s']:.1f} s "
                f"({'MET' if ok else 'MISSED'}); all of memopt adds "
                f"{100 * s['added_share']:.1f}% ({s['added_s']:.2f} s)."
            )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="llama,gpt2")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", type=int, default=1, help="runs of each (model, variant)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per worker process")
    p.add_argument("--smoke", action="store_true", help="tiny models (runs on CPU)")
    p.add_argument("--out", help="JSON results, written after every worker")
    p.add_argument("--table", nargs="+", help="print the table of saved runs and exit")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    p.add_argument(
        "--planner",
        nargs="+",
        metavar="MODEL:BATCH:SEQ",
        help=f"CPU: trace each (models: {', '.join(HF)}), solve at --budgets, print CPU seconds",
    )
    p.add_argument("--budgets", default=",".join(BUDGETS))
    p.add_argument("--menu", action="store_true", help="with --planner: the step menu too")
    args = p.parse_args()
    if args.planner:
        rows = []
        for spec in args.planner:
            model, batch, seq = spec.split(":")
            rows += planner_rows(model, int(batch), int(seq), args.budgets.split(","), args.menu)
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)
        print(planner_table(rows))
        return
    if args.worker:
        result = worker(*args.worker, args.smoke)
        print("RESULT " + json.dumps(result), flush=True)
        return
    if args.table:
        runs = []
        for path in args.table:
            with open(path) as f:
                runs.append(json.load(f))
        print(table({"meta": runs[0]["meta"], "rows": [r for d in runs for r in d["rows"]]}))
        return
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("plan_time needs a CUDA device (or --smoke)")
    meta = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "smoke": args.smoke,
        "calibration_s": calibration_seconds(),
    }
    data = {"meta": meta, "rows": []}
    for model_name in args.models.split(","):
        for variant in args.variants.split(","):
            for _ in range(args.repeat):
                row = run_worker(model_name, variant, args.smoke, args.timeout)
                data["rows"].append(row)
                brief = {k: row.get(k) for k in ("model", "variant", "error")}
                for k in ("first_step_s", "compile_s", "plan_seconds", "process_s"):
                    if row.get(k) is not None:
                        brief[k] = round(row[k], 2)
                brief.update(
                    {k: round(v, 3) for k, v in row.get("timers", {}).items() if v >= 0.005}
                )
                print(json.dumps({k: v for k, v in brief.items() if v is not None}), flush=True)
                if args.out:
                    with open(args.out, "w") as f:
                        json.dump(data, f, indent=1)
    print()
    print(table(data))


def median_rows(rows: list[dict]) -> list[dict]:
    """One row per (model, variant): the run with the median compile time."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["variant"]), []).append(r)
    out = []
    for runs in groups.values():
        ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["compile_s"])
        out.append(ok[len(ok) // 2] if ok else runs[0])
    return out


if __name__ == "__main__":
    main()
