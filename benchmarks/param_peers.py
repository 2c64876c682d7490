"""Parameter offload against its peers, each variant in its own process (issue 15's table).

    python3 benchmarks/param_peers.py run --out docs/data/param_peers.json [--size 1b] [--jobs ...]
    python3 benchmarks/param_peers.py variant --name memopt --bs 2 --seq 512     # one process
    python3 benchmarks/param_peers.py adamw [--numel 67108864]                   # CPU AdamW speed

Model: Llama-style, random weights (``1b``: 20 layers, hidden 2048, ffn 5632, 16 heads, 4 KV
heads, vocab 32000 = 1.033 B parameters), bf16 autocast, HF gradient checkpointing. 12 steps,
s/step is the median of the last 9. Offload variants run with the GPU capped by
``set_per_process_memory_fraction`` (``--cap-gib``); ``gpu`` runs uncapped. Losses are compared
with the ``gpu`` variant's. Variants:

* ``gpu``: everything on the GPU, torch AdamW(fused).
* ``fsdp2``: ``fully_shard`` per layer + root, world size 1, ``CPUOffloadPolicy(pin_memory=True)``,
  ``MixedPrecisionPolicy(bf16, fp32 reduce)``, torch AdamW(fused) on the CPU shards.
* ``fsdp2-nooffload``: the same sharding with everything on the GPU, torch AdamW(fused) there
  (uncapped): the "no offload" reference of ``param_offload=0.5``.
* ``memopt``: ``memopt.params.shard_with_offload(model, f)`` (same FSDP2 groups and policies)
  + ``HostAdamW(overlap=True)`` (host updates during backward, and the next forward waits per
  group; ``host_dtype="auto"``, passed by this benchmark: at world size 1 bf16 host shards
  with fp32 masters, 2 B/param transfers); ``memopt-nooverlap`` updates after backward;
  ``memopt-bf16host`` asks for bf16 host shards explicitly, ``memopt-fp32host`` for fp32 ones
  (memopt's default, ``host_dtype=None``); ``memopt-half`` puts half the bytes on the host;
  ``memopt-auto`` starts with nothing there and lets ``param_offload="auto"`` choose (a probe
  after step 5, the rest after step 8; uncapped, 10 more steps, s/step the median of the last
  9, all on the final placement).
* (``streamer``, the old ``apply_param_offload(model, 0.9)`` + ``CPUAdamW``, was measured in
  docs/data/param_peers_2026-11-24.json and then deleted from memopt.)
* ``torchao``: ``CPUOffloadOptimizer(offload_gradients=True)`` when torchao imports (uncapped).
* (``cpuadamw``, torchao's placement with ``memopt.CPUAdamW``, was measured against it in
  docs/data/param_peers_cpuadamw_s22.json, 1.33-1.40x slower, and then deleted from memopt.)
* ``ds-z2``: DeepSpeed ZeRO-Offload: ZeRO stage 2 + ``offload_optimizer`` to pinned host
  memory (``DeepSpeedCPUAdam`` in AdamW mode: fp32 masters and moments on the host), DeepSpeed's
  bf16 mode (bf16 weights and gradients on the GPU, no autocast); uncapped.
* ``ds-z3``: DeepSpeed ZeRO-Infinity to the CPU: ZeRO stage 3 + ``offload_param`` and
  ``offload_optimizer`` to pinned host memory, the same optimizer and bf16 mode, live parameters and
  reuse distance 1e8 and a 5e7-element gradient bucket (``param_peers_ds.DS_Z3_FIT``: the defaults
  keep ~1 GB of gathered weights and a 1 GB bucket on the GPU); capped at ``--cap-gib``. Both run in
  one process (benchmarks/param_peers_ds.py sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
  MASTER_PORT, then ``deepspeed.init_distributed("nccl")``); ``deepspeed.initialize`` converts the
  built model (ZeRO-3 partitions it there); ``engine.backward``/``engine.step`` run behind the
  optimizer calls (``param_peers_ds._DSEngine``). Their GPU peak counts from after
  ``deepspeed.initialize`` (that call's own peak is ``init_peak_gib``). ``ds-z3+KEY=VALUE`` sets a
  ``zero_optimization`` key (``ds-z3+stage3_max_live_parameters=1e9``). The first run JIT-builds the
  ``cpu_adam`` op with ninja (about 1-2 min; cached under ``$TORCH_EXTENSIONS_DIR``, by default
  ~/.cache/torch_extensions/py3XX_cuXXX/cpu_adam, and reused by later processes);
  ``ds-z2+torch_adam=1`` steps torch's AdamW on the host shards instead (no build).

``--accum K`` runs K micro-batches of the job's shape per step (tokens/s counts all K; memopt
with ``overlap`` gets ``accumulation_steps=K``); ``--clip X`` clips the global gradient norm to X
before each step (torch's ``clip_grad_norm_``; memopt's ``HostAdamW.clip_grad_norm_``, which
needs ``memopt-nooverlap``).

A job ``memopt+threads=auto+batch=param:2x512`` passes HostAdamW keywords (``chunk=N`` sets the
bf16 update's piece size of torch's kernel; ``kernel=torch`` picks torch's fused kernel over the
native C loop). memopt rows record, per step, the seconds the update worker finished
work (``host_busy_s``) and the training thread waited for it (``host_wait_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

GiB = 2**30
SIZES = {
    "1b": dict(layers=20, hidden=2048, inter=5632, vocab=32000, heads=16),
    "tiny": dict(layers=4, hidden=256, inter=688, vocab=1024, heads=4),
}
DEFAULT_JOBS = (
    "memopt:2x512,fsdp2:2x512,gpu:2x512,memopt-nooverlap:2x512,memopt-bf16host:2x512,"
    "memopt:4x1024,fsdp2:4x1024,gpu:4x1024,memopt-half:2x512,torchao:2x512,"
    "memopt:8x1024,fsdp2:8x1024"
)


def llama(size: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    s = SIZES[size]
    cfg = LlamaConfig(
        vocab_size=s["vocab"],
        hidden_size=s["hidden"],
        intermediate_size=s["inter"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["heads"] // 4,
        max_position_embeddings=4096,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):  # fast init, same weights in every process
        model = LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable({"use_reentrant": False})
    return model


def batches(n: int, bs: int, seq: int, vocab: int):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (bs, seq), generator=g) for _ in range(n)]


def host_rss() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def cap_gpu(gib: float) -> None:
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(gib * GiB / total)
    torch.cuda.reset_peak_memory_stats()


def _mp(reduce: str = "fp32"):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[reduce]
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=dt)


def setup(name: str, model, args):
    """Place ``model`` for variant ``name``; returns (model, optimizer, extra report dict)."""
    kw = dict(lr=1e-4, weight_decay=0.01)
    if name == "gpu":
        return model, torch.optim.AdamW(model.parameters(), fused=True, **kw), {}
    if name == "torchao":
        from torchao.optim import CPUOffloadOptimizer

        opt = CPUOffloadOptimizer(
            model.parameters(), torch.optim.AdamW, offload_gradients=True, fused=True, **kw
        )
        return model, opt, {}
    if name in ("ds-z2", "ds-z3"):
        import param_peers_ds  # benchmarks/ is on sys.path when run as a script

        cap = None if name in UNCAPPED else lambda: cap_gpu(args.cap_gib)
        return param_peers_ds.setup(name, model, args, _options(args.options), cap)
    model.cpu()
    if name not in UNCAPPED:
        cap_gpu(args.cap_gib)
    from memopt.params.fsdp import ensure_process_group

    ensure_process_group("cuda")
    if name == "fsdp2":
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        for layer in model.model.layers:
            fully_shard(layer, offload_policy=CPUOffloadPolicy(pin_memory=True), mp_policy=_mp())
        fully_shard(model, offload_policy=CPUOffloadPolicy(pin_memory=True), mp_policy=_mp())
        return model, torch.optim.AdamW(model.parameters(), fused=True, **kw), {}
    if name == "fsdp2-nooffload":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer, mp_policy=_mp())
        fully_shard(model, mp_policy=_mp())
        return model, torch.optim.AdamW(model.parameters(), fused=True, **kw), {}
    from memopt.params import HostAdamW, format_placement, shard_with_offload

    host_dtype = {"memopt-bf16host": torch.bfloat16, "memopt-fp32host": None}.get(name, "auto")
    f = {"memopt-half": 0.5, "memopt-auto": "auto"}.get(name, args.fraction)
    kw.update(_options(args.options))
    if "host" in kw:  # memopt-half+host=fp32: the host shards' dtype
        host_dtype = {"fp32": None, "bf16": torch.bfloat16}[kw.pop("host")]
    stage = bool(kw.pop("stage", 0))  # memopt-half+stage=1: world-size-1 staging
    mp = _mp(kw.pop("reduce", "fp32"))  # reduce=bf16: gradients reduced in bf16
    rec = shard_with_offload(model, f, mp_policy=mp, host_dtype=host_dtype, stage_ahead=stage)
    if "chunk" in kw:  # pieces of the bf16 update (memopt.params.adamw_kernel.CHUNK)
        from memopt.params import adamw_kernel

        adamw_kernel.CHUNK = kw.pop("chunk")
    overlap = name != "memopt-nooverlap"
    acc = args.accum if overlap else 1
    opt = HostAdamW(model.parameters(), offload=rec, overlap=overlap, accumulation_steps=acc, **kw)
    rows = rec.placement_rows() + opt.placement_rows()
    extra = {"placement": format_placement(rows), "threads": opt.threads}
    extra["kernel"] = opt.kernel
    extra["record"] = rec
    extra["pinned_bytes"] = sum(r["param_bytes"] for r in rows if r.get("pinned"))
    extra["host_bytes"] = sum(r["param_bytes"] for r in rows if r["where"] == "cpu")
    return model, opt, extra


def _options(text: str) -> dict:
    """``threads=auto+batch=param`` -> HostAdamW keywords (ints where they parse)."""
    out = {}
    for kv in filter(None, text.split("+")):
        key, val = kv.split("=")
        out[key] = int(val) if val.isdigit() else val
    return out


UNCAPPED = ("gpu", "torchao", "memopt-half", "fsdp2-nooffload", "memopt-auto", "ds-z2")


def variant(args) -> dict:
    if args.name == "torchao":
        import torchao  # noqa: F401 -- fail before building the model when it is missing
    if args.name.startswith("ds-"):
        import deepspeed  # noqa: F401 -- the same
    model = llama(args.size)
    nparam = sum(p.numel() for p in model.parameters())
    model, opt, extra = setup(args.name, model, args)
    rec = extra.pop("record", None)
    # 'auto' probes after step 5 and moves the rest after step 8; the 2 steps after a move
    # still wait for it, so the last 9 of 12 + 10 steps all run on the final placement
    steps = args.steps + (10 if args.name == "memopt-auto" else 0)
    micro = args.accum
    flat = batches(steps * micro, args.bs, args.seq, SIZES[args.size]["vocab"])
    data = [flat[i : i + micro] for i in range(0, len(flat), micro)]
    losses, times, host, phases = [], [], [], []

    backward = getattr(opt, "backward", torch.Tensor.backward)  # DeepSpeed: engine.backward
    amp = getattr(opt, "autocast", True)

    def one(xs):
        total, t0 = 0.0, time.perf_counter()
        for x in xs:
            x = x.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=x, labels=x).loss / len(xs)
            backward(loss)
            total = total + loss.detach()
        t1 = time.perf_counter()
        if args.clip:
            clip = getattr(opt, "clip_grad_norm_", None)
            if clip is not None:
                clip(args.clip)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # host seconds (no device sync) until each phase returned: backward, clip, step
        phases.append({"fwd_bwd": t1 - t0, "clip": t2 - t1, "step": t3 - t2})
        return total

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import diag_threads

    cpu = []  # the training thread's own CPU seconds per step (launches, hooks, waits spin)
    first = len(data) - 9 if args.name == "memopt-auto" else 3  # the steps the median reads
    for i, x in enumerate(data):
        if i == first:  # every thread's CPU and run-queue time over the timed steps
            threads0, loads = diag_threads.snapshot(), []
        torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.thread_time()
        loss = one(x)
        c1 = time.thread_time()
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        cpu.append(c1 - c0)
        if i >= first:
            loads.append(diag_threads.host_load())
        if hasattr(opt, "host_stats"):
            host.append(opt.host_stats())
    s = statistics.median(times[first:])
    extra["phases_s"] = {k: statistics.median(ph[k] for ph in phases[first:]) for k in phases[0]}
    extra["threads"] = diag_threads.per_step(threads0, diag_threads.snapshot(), len(data) - first)
    extra["host_runnable"] = statistics.median(ld["runnable"] for ld in loads) if loads else None
    if args.waits:  # one more step profiled: the compute stream's waits and their causes
        import diag_waits

        k = max(1, args.profile_steps)  # the last k batches again, one trace
        events = diag_waits.profile(lambda: [one(x) for x in data[-k:]])
        extra["waits"] = diag_waits.analyze(events)
        extra["waits"]["waits"] = extra["waits"]["waits"][:12]
        extra["waits"]["idle"] = {**diag_waits.idle(events), "steps": k}
    if rec is not None:  # the placement at the end (the automatic one's choice included)
        from memopt.params import format_placement

        opt.wait()
        rows = rec.placement_rows() + opt.placement_rows()
        extra["placement"] = format_placement(rows)
        extra["staging"] = rec.staging.stats() if rec.staging is not None else None
        extra["host_share"] = rec.plan.host_share
        extra["prefetch"] = rec.prefetch
        stats = opt.host_stats()
        extra["host_pinned_bytes"] = stats["host_pinned_bytes"]
        extra["host_pageable_bytes"] = stats["host_pageable_bytes"]
        if "auto" in stats:
            extra["auto"] = stats["auto"]
    nvme = getattr(opt, "_nvme", None)
    if nvme is not None:  # the moment file's achieved I/O
        st = nvme.store
        extra["nvme"] = {
            "path": st.path,
            "file_bytes": nvme.nbytes,
            "read_GBps": st.read_bytes / max(st.read_seconds, 1e-9) / 1e9,
            "write_GBps": st.write_bytes / max(st.write_seconds, 1e-9) / 1e9,
            "read_bytes": st.read_bytes,
            "write_bytes": st.write_bytes,
        }
    if hasattr(opt, "overlapped_updates"):
        extra["overlapped_updates"] = opt.overlapped_updates
        extra["worker_threads"] = opt.worker_threads
    if host:  # per step: seconds the update worker was busy / the training thread waited
        for key in ("busy_s", "wait_s"):
            cum = [0.0] + [h[key] for h in host]
            extra[f"host_{key}"] = [b - a for a, b in zip(cum, cum[1:])]
        extra["host_busy_median_s"] = statistics.median(extra["host_busy_s"][3:])
        extra["host_wait_median_s"] = statistics.median(extra["host_wait_s"][3:])
    return {
        "name": args.name + (f"+{args.options}" if args.options else ""),
        "bs": args.bs,
        "seq": args.seq,
        "params": nparam,
        "s_per_step": s,
        "thread_cpu_s": statistics.median(cpu[first:]),
        "tokens_per_s": args.bs * args.seq * micro / s,
        "accum": micro,
        "clip": args.clip,
        "peak_gib": torch.cuda.max_memory_allocated() / GiB,
        "cap_gib": None if args.name in UNCAPPED else args.cap_gib,
        "losses": losses,
        "times": times,
        **host_rss(),
        **extra,
    }


def run(args) -> None:
    results = []
    for job in args.jobs.split(","):
        name, shape = job.split(":")
        bs, seq = (int(v) for v in shape.split("x"))
        cmd = [sys.executable, __file__, "variant", "--name", name, "--bs", str(bs)]
        cmd += ["--seq", str(seq), "--size", args.size, "--cap-gib", str(args.cap_gib)]
        cmd += ["--fraction", str(args.fraction), "--steps", str(args.steps)]
        cmd += ["--accum", str(args.accum), "--clip", str(args.clip)]
        cmd += ["--waits", "--profile-steps", str(args.profile_steps)] if args.waits else []
        if "+" in name:  # memopt+threads=auto: HostAdamW keywords
            base, opts = name.split("+", 1)
            cmd[cmd.index("--name") + 1] = base
            cmd += ["--options", opts]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if line:
            res = json.loads(line[-1][7:])
        else:
            tail = (p.stdout + p.stderr)[-1500:]
            oom = "OutOfMemory" in tail or "out of memory" in tail
            res = {"name": name, "bs": bs, "seq": seq, "error": "OOM" if oom else tail}
        res["wall_s"] = time.time() - t0
        results.append(res)
        print(summary(res, results), flush=True)
        with open(args.out, "w") as f:  # after every job: a cut-off run keeps what it has
            meta = {"torch": torch.__version__, "size": args.size, "device": _device()}
            json.dump({**meta, "results": results}, f, indent=1)
    for res in results:
        if "losses" in res and (ref := _ref(res, results)):
            res["max_loss_diff_vs_gpu"] = max(abs(a - b) for a, b in zip(ref, res["losses"]))
    with open(args.out, "w") as f:
        json.dump({**meta, "results": results}, f, indent=1)
    print(table(results))


def _device() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _ref(res, results):
    for r in results:
        if r["name"] == "gpu" and r["bs"] == res["bs"] and r["seq"] == res["seq"] and "losses" in r:
            return r["losses"]
    return None


def summary(res, results) -> str:
    if "error" in res:
        return f"{res['name']} {res['bs']}x{res['seq']}: {res['error'][-600:]}"
    ref = _ref(res, results)
    diff = max(abs(a - b) for a, b in zip(ref, res["losses"])) if ref else float("nan")
    res["max_loss_diff_vs_gpu"] = diff
    return (
        f"{res['name']} {res['bs']}x{res['seq']}: {res['s_per_step']:.3f} s/step, "
        f"{res['tokens_per_s']:.0f} tok/s, peak {res['peak_gib']:.2f} GiB, host RSS peak "
        f"{res.get('VmHWM', 0) / GiB:.1f} GiB, loss diff vs gpu {diff:.3g}"
    )


def table(results) -> str:
    lines = [
        "| variant | batch | s/step | tokens/s | GPU peak GiB | host RSS peak GiB | loss diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        shape = f"{r['bs']} × {r['seq']}"
        if "error" in r:
            err = "out of memory" if r["error"] == "OOM" else "failed"
            lines.append(f"| {r['name']} | {shape} | {err} | | | | |")
            continue
        lines.append(
            f"| {r['name']} | {shape} | {r['s_per_step']:.3f} | {r['tokens_per_s']:,.0f} | "
            f"{r['peak_gib']:.2f} | {r.get('VmHWM', 0) / GiB:.1f} | "
            f"{r.get('max_loss_diff_vs_gpu', float('nan')):.3g} |"
        )
    return "\n".join(lines)


def _best(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def adamw(args) -> dict:
    """CPU AdamW: torch's fused kernel against memopt's, with and without the bf16 write-back."""
    from memopt.params import adamw_kernel as k

    n = args.numel
    s = k.AdamWStep(lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, step=3)
    w, m, v = torch.randn(n), torch.zeros(n), torch.zeros(n)
    g16, out = torch.randn(n).bfloat16(), torch.empty(n, dtype=torch.bfloat16)
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n)
    ref = torch.optim.AdamW([p], lr=1e-4, fused=True)
    p16 = torch.nn.Parameter(torch.randn(n))
    p16.grad = torch.randn(n)
    ref16 = torch.optim.AdamW([p16], lr=1e-4, fused=True)

    def torch_bf16() -> None:  # torch's way to keep a bf16 copy: cast grad, step, cast out
        p16.grad.copy_(g16)
        ref16.step()
        out.copy_(p16)

    def memopt_bf16(chunk: int):
        k.CHUNK = chunk
        scratch = torch.empty(min(n, chunk))
        return lambda: k.torch_update(w, g16, m, v, out, s, scratch)

    triad = torch.empty(n)
    res = {
        "numel": n,
        "threads": torch.get_num_threads(),
        "triad_GBps": 12 * n / _best(lambda: torch.add(w, m, alpha=0.5, out=triad), 5) / 1e9,
        "torch_fused_fp32_s": _best(ref.step, args.reps),
        "torch_fused_bf16_writeback_s": _best(torch_bf16, args.reps),
        "memopt_bf16_writeback_s": _best(memopt_bf16(1 << 20), args.reps),
        "memopt_bf16_writeback_unchunked_s": _best(memopt_bf16(n), args.reps),
    }
    from memopt.params import adamw_native as an

    if an.available():
        hp = [s.tensor()]
        t = args.threads or torch.get_num_threads()
        res["native_threads"] = t
        res["native_fp32_s"] = _best(lambda: an.group_update([w], [p.grad], [m], [v], [None], hp, t), args.reps)  # fmt: skip
        res["native_bf16_writeback_s"] = _best(
            lambda: an.group_update([w], [g16], [m], [v], [out], hp, t), args.reps
        )
    base = res["torch_fused_fp32_s"]
    for key in [key for key in res if key.endswith("_s")]:
        res[key[:-2] + "_vs_torch_fused_fp32"] = res[key] / base
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["run", "variant", "adamw"])
    ap.add_argument("--name", default="memopt")
    ap.add_argument("--jobs", default=DEFAULT_JOBS)
    ap.add_argument("--size", default="1b", choices=sorted(SIZES))
    ap.add_argument("--bs", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--cap-gib", type=float, default=3.5)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    ap.add_argument("--clip", type=float, default=0.0, help="clip the grad norm to this")
    ap.add_argument("--options", default="", help="HostAdamW keywords: threads=auto+batch=param")
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--numel", type=int, default=1 << 26)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="adamw: the native loop's threads")
    ap.add_argument("--out", default="param_peers.json")
    ap.add_argument("--waits", action="store_true", help="profile more steps: GPU waits, idle")
    ap.add_argument("--profile-steps", type=int, default=1, help="steps --waits profiles")
    ap.add_argument("--dump-after", type=float, default=0, help="faulthandler stack dump (s)")
    args = ap.parse_args()
    if args.dump_after:
        import faulthandler

        faulthandler.dump_traceback_later(args.dump_after, exit=True)
    if args.mode == "run":
        run(args)
    elif args.mode == "variant":
        print("RESULT " + json.dumps(variant(args)), flush=True)
        os._exit(0)  # skip process-group teardown
    else:
        res = adamw(args)
        print(json.dumps(res, indent=1))
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
