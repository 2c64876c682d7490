"""Activation offload on GPT-style and Llama-style Hugging Face models (bf16, random weights).

For the baseline (no offload) and each k (layers offloaded, default 1..n-1) it measures, in
one run: peak memory of a step, median step time, forward time, bytes offloaded per step,
gradients against the baseline (bitwise), a torch.profiler trace summary (copies on the side
stream and their overlap with compute), and for one k, allocated/reserved/pinned memory over
``--stability-steps`` steps. Deterministic algorithms and Inductor's deterministic mode are on
(no timing-based kernel choices), so gradients are comparable bitwise across compiles. Pinned memcpy bandwidth is measured first, in the same process,
and gives the budget ``bandwidth x forward time``: offloads that fit should cost <= 5%.

    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 benchmarks/offload.py --model gpt --out gpt.json
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 benchmarks/offload.py --model llama --out llama.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

from memopt.offload import ops

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from memopt.offload.timeline import format_bytes
from memopt.offload.trace import summarize_trace
from tests.offload_partitioner import LayerOffloadPartitioner  # noqa: E402

MiB = 1 << 20


def build_model(args):
    import transformers

    if args.model == "gpt":
        cfg = transformers.GPT2Config(
            n_layer=args.layers,
            n_embd=args.hidden,
            n_head=args.heads,
            n_positions=args.seq,
            vocab_size=args.vocab,
            attn_pdrop=0.0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_implementation=args.attn,
        )
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(
            num_hidden_layers=args.layers,
            hidden_size=args.hidden,
            intermediate_size=args.intermediate or int(args.hidden * 8 / 3 // 64 * 64),
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads or args.heads,
            max_position_embeddings=args.seq,
            vocab_size=args.vocab,
            attn_implementation=args.attn,
        )
        model = transformers.LlamaForCausalLM(cfg)
    return model.to("cuda", torch.bfloat16)


def pinned_bandwidth(nbytes: int = 256 * MiB, reps: int = 10) -> dict[str, float]:
    """Device<->pinned host copy bandwidth (GB/s) on a side stream, median of ``reps``."""
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    stream = torch.cuda.Stream()
    out = {}
    for name, dst, src in (("d2h", host, dev), ("h2d", dev, host)):
        times = []
        for _ in range(reps + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record()
                dst.copy_(src, non_blocking=True)
                end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        out[name] = nbytes / statistics.median(times[2:]) / 1e9
    return out


class Runner:
    def __init__(self, model, ids):
        self.model, self.ids = model, ids

    def step(self, compiled) -> tuple[float, float]:
        """One training step (no optimizer); returns (forward s, step s)."""
        self.model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = compiled(input_ids=self.ids, labels=self.ids, use_cache=False).loss
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        return t1 - t0, time.perf_counter() - t0

    def grads(self) -> list[torch.Tensor]:
        return [p.grad.detach().clone() for p in self.model.parameters() if p.grad is not None]


def late_sync(n: int, k: int) -> dict:
    """Offload layers 0..k-1, every offload finishing at the end of the forward (the whole
    forward hides the copies); reloads as in the default dict."""
    return {i: (True, n, False, k - i) for i in range(k)}


def compile_model(model, k: int, min_bytes: int, sync: dict | None = None):
    torch._dynamo.reset()
    if k == 0:
        return torch.compile(model), None
    if sync is not None:
        p = LayerOffloadPartitioner(sync=sync, min_bytes=min_bytes)
    else:
        p = LayerOffloadPartitioner(offload_layers=k, min_bytes=min_bytes)
    return torch.compile(model, options={"custom_partitioner_fn": p}), p


def measure(args, runner: Runner, k: int, ref_grads, trace_dir: str, late: bool = False):
    """One configuration; returns (row, gradients of one step on the fixed batch)."""
    sync = late_sync(args.layers, k) if late else None
    compiled, part = compile_model(runner.model, k, args.min_bytes, sync)
    t_compile = time.perf_counter()
    runner.step(compiled)
    t_compile = time.perf_counter() - t_compile
    for _ in range(args.warmup):
        runner.step(compiled)
    # gradients of one step, same batch as the baseline's
    runner.step(compiled)
    grads = runner.grads()
    if ref_grads is None:  # the baseline: is a step reproducible bitwise at all?
        runner.step(compiled)
        again = runner.grads()
        reproducible = all(torch.equal(a, b) for a, b in zip(grads, again))
        recompiled, _ = compile_model(runner.model, 0, args.min_bytes)
        runner.step(recompiled)
        again = runner.grads()
        recompile_reproducible = all(torch.equal(a, b) for a, b in zip(grads, again))
        del again, recompiled
    # peak memory of one step, relative to what is allocated before it
    runner.model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ops.reset_copy_stats()
    runner.step(compiled)
    peak = torch.cuda.max_memory_allocated() - base
    copies = ops.copy_stats()
    fwd, steps = [], []
    for _ in range(args.steps):
        f, s = runner.step(compiled)
        fwd.append(f)
        steps.append(s)
    row = {
        "k": k,
        "sync": "late" if late else "default",
        "compile_s": round(t_compile, 1),
        "peak_bytes": peak,
        "step_ms": 1e3 * statistics.median(steps),
        "fwd_ms": 1e3 * statistics.median(fwd),
        "d2h_bytes_per_step": copies.d2h_bytes,
        "h2d_bytes_per_step": copies.h2d_bytes,
        "async_copies": copies.async_copies,
        "sync_copies": copies.sync_copies,
    }
    if part is not None and part.results:
        r = part.results[0]
        row["offloaded_bytes"] = r.total_bytes()
        row["bytes_per_layer"] = r.bytes_per_layer()
        row["layers"] = part.layer_names
        row["notes"] = list(r.notes)
        row["timeline"] = r.summary()
    else:
        row["offloaded_bytes"] = 0
    if ref_grads is None:
        row["baseline_reproducible"] = reproducible
        row["baseline_recompile_reproducible"] = recompile_reproducible
    else:
        names = [n for n, p in runner.model.named_parameters() if p.grad is not None]
        differ = [n for n, a, b in zip(names, grads, ref_grads) if not torch.equal(a, b)]
        diff = max(((a.float() - b.float()).abs().max().item() for a, b in zip(grads, ref_grads)))
        row["grads_bitwise_equal"] = len(grads) == len(ref_grads) and not differ
        row["grads_differ"] = differ[:5]
        row["grads_max_abs_diff"] = diff
    if args.profile_steps and k:
        path = os.path.join(trace_dir, f"{args.model}_k{k}{'_late' if late else ''}.json")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profile_steps):
                runner.step(compiled)
        prof.export_chrome_trace(path)
        summary = summarize_trace(path)
        row["trace"] = summary.to_dict()
        row["trace_line"] = summary.line()
        row["trace_path"] = path
    if k and k == args.stability_k and not late:
        row["stability"] = stability(args, runner, compiled)
    del compiled
    return row, grads


def stability(args, runner: Runner, compiled) -> dict:
    """Allocated / reserved / pinned-pool bytes after step 10 and after the last step."""
    marks = {}
    for i in range(1, args.stability_steps + 1):
        runner.step(compiled)
        if i in (10, args.stability_steps):
            pool = ops.POOL.stats()
            marks[i] = {
                "allocated": torch.cuda.memory_allocated(),
                "reserved": torch.cuda.memory_reserved(),
                "pinned_pool": pool.bytes,
                "pinned_allocations": pool.allocations,
                "pending_copies": ops.pending_copies(),
            }
    first, last = marks[10], marks[args.stability_steps]
    growth = {key: last[key] - first[key] for key in first}
    return {"steps": args.stability_steps, "at_10": first, "at_end": last, "growth": growth}


def report(args, bw: dict, rows: list[dict]) -> str:
    base = rows[0]
    fwd_s = base["fwd_ms"] / 1e3
    budget = bw["d2h"] * 1e9 * fwd_s
    lines = [
        f"model={args.model} layers={args.layers} hidden={args.hidden} batch={args.batch} "
        f"seq={args.seq} dtype=bf16 attn={args.attn} torch={torch.__version__} "
        f"device={torch.cuda.get_device_name()}",
        f"pinned memcpy: D2H {bw['d2h']:.1f} GB/s, H2D {bw['h2d']:.1f} GB/s (256 MiB, side stream)",
        f"baseline: step {base['step_ms']:.1f} ms, forward {base['fwd_ms']:.1f} ms, "
        f"peak {format_bytes(base['peak_bytes'])}",
        f"budget: D2H bandwidth x forward time = {format_bytes(int(budget))} per step "
        "(offloads within it should cost <= 5% step time)",
        f"{'k':>2} {'sync':>7} {'offloaded':>11} {'peak':>11} {'drop':>11} {'drop/off':>8} "
        f"{'step ms':>8} {'+%':>6} {'fits':>5} {'D2H GB/s':>9} {'of bw':>6} {'overlap':>7} "
        f"{'bitwise':>7}",
    ]
    for r in rows:
        off, drop = r["offloaded_bytes"], base["peak_bytes"] - r["peak_bytes"]
        ratio = f"{drop / off:.2f}" if off else "-"
        slow = 100 * (r["step_ms"] / base["step_ms"] - 1)
        tr = r.get("trace", {}).get("d2h", {})
        gbps = tr.get("gbps", 0.0)
        lines.append(
            f"{r['k']:>2} {r.get('sync', 'default'):>7} {format_bytes(off):>11} {format_bytes(r['peak_bytes']):>11} "
            f"{format_bytes(max(drop, 0)):>11} {ratio:>8} {r['step_ms']:>8.1f} {slow:>+6.1f} "
            f"{('yes' if off <= budget else 'no') if off else '-':>5} "
            f"{gbps:>9.1f} {(gbps / bw['d2h'] if gbps else 0):>6.0%} "
            f"{tr.get('overlap', 0):>7.0%} {str(r.get('grads_bitwise_equal', '-')):>7}"
        )
    for r in rows:
        tag = f"k={r['k']}" + (" (late sync)" if r.get("sync") == "late" else "")
        if r.get("grads_differ"):
            lines.append(f"grads differing at {tag}: {r['grads_differ']}")
        if "trace_line" in r:
            lines.append(f"trace {tag}: {r['trace_line']}")
        if "stability" in r:
            g = r["stability"]["growth"]
            lines.append(
                f"stability k={r['k']} over {r['stability']['steps']} steps: growth "
                + ", ".join(f"{key} {val:+d}" for key, val in g.items())
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", choices=("gpt", "llama"), default="llama")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=0)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    ap.add_argument("--k", default="", help="comma-separated k values (default 1..n-1)")
    ap.add_argument(
        "--late",
        default="",
        help="comma-separated k values also run with every offload finishing at the end of the "
        "forward (sync {i: (True, n, False, k-i)})",
    )
    ap.add_argument("--emulate-precision-casts", action="store_true")
    ap.add_argument(
        "--no-inductor-deterministic",
        action="store_true",
        help="let Inductor autotune by timing (faster kernels, but compiles may differ bitwise)",
    )
    ap.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--stability-steps", type=int, default=200)
    ap.add_argument("--stability-k", type=int, default=-1, help="default: the middle k")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--trace-dir", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",") if x] or list(range(1, args.layers))
    if args.stability_k < 0:
        args.stability_k = ks[len(ks) // 2]
    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="memopt_offload_")
    os.makedirs(trace_dir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    torch._inductor.config.emulate_precision_casts = args.emulate_precision_casts
    # no on-device benchmarking that changes numerics (autotuned reduction configs, pad_mm):
    # two compiles of the same graph give the same kernels, so gradients can be compared bitwise
    torch._inductor.config.deterministic = not args.no_inductor_deterministic

    bw = pinned_bandwidth()
    torch.manual_seed(0)
    model = build_model(args)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    runner = Runner(model, ids)
    row, ref = measure(args, runner, 0, None, trace_dir)
    rows = [row]
    for k in ks:
        rows.append(measure(args, runner, k, ref, trace_dir)[0])
        print(f"k={k}: {rows[-1]['step_ms']:.1f} ms, peak {format_bytes(rows[-1]['peak_bytes'])}")
    for k in [int(x) for x in args.late.split(",") if x]:
        rows.append(measure(args, runner, k, ref, trace_dir, late=True)[0])
        print(
            f"k={k} late: {rows[-1]['step_ms']:.1f} ms, peak {format_bytes(rows[-1]['peak_bytes'])}"
        )
    text = report(args, bw, rows)
    print(text)
    print(
        f"baseline reproducible bitwise: same compile, two steps: {rows[0]['baseline_reproducible']}"
        f"; a second compile: {rows[0]['baseline_recompile_reproducible']}"
    )
    for r in rows[1:2]:
        print(r.get("timeline", ""))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"args": vars(args), "bandwidth": bw, "rows": rows, "report": text}, f, indent=1
            )


if __name__ == "__main__":
    main()
