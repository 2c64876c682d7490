"""Two GPUs of one host against one: FSDP2 step plans and parameter offload per rank.

    torchrun --nproc-per-node 2 benchmarks/multi_gpu.py steps --out steps_w2.json  # and at 1
    python benchmarks/multi_gpu.py params --world 2 --out params_w2.json   # launches torchrun
    python benchmarks/multi_gpu.py table --steps-json steps_w2.json --steps-json-1gpu ...

``steps``: benchmarks/fsdp_step.py's 8-layer Llama, ``--batch`` rows per rank of one global
batch: torch.compile (+ ``activation_memory_budget`` 0.5, 0.1; plain again last), memopt level
1, budgets at torch's peaks (the largest over ranks), ``offload_layers=1,2``. A step takes the
slowest rank's time, the loss the ranks' mean; memopt rows tell if the ranks' plans agree.
``params``: benchmarks/param_peers.py's 1 B model, GPU capped per rank, FSDP2 CPUOffloadPolicy
against memopt's shard_with_offload + HostAdamW, one torchrun per job. ``--device cpu`` (gloo)
with ``--tiny`` / ``--size tiny``: the CPU smoke test of every mode.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
if "LOCAL_RANK" in os.environ:  # under torchrun: private compile caches per rank (and run size)
    _tag = f"w{os.environ.get('WORLD_SIZE', '1')}_rank{os.environ['LOCAL_RANK']}"
    _base = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/inductor_multi_gpu")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{_base}_{_tag}"
    os.environ["MEMOPT_CACHE_DIR"] = os.environ.get("MEMOPT_CACHE_DIR", "/tmp/memopt_multi_gpu")
    os.environ["MEMOPT_CACHE_DIR"] += f"_{_tag}"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_phases import StepPhases  # noqa: E402

GiB = 2**30
FULL = dict(layers=8, hidden=2048, heads=32, kv=8, ffn=8192, vocab=32000)
TINY = dict(layers=3, hidden=64, heads=4, kv=2, ffn=128, vocab=128)
STEPS_RUN = {"batch": (4, 2), "seq": (2048, 32), "warmup": (5, 3), "iters": (8, 2)}  # full, tiny


def init_dist(device: str, timeout_s: int):
    """Set the device and join the group torchrun describes; returns (rank, world, device)."""
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = datetime.timedelta(seconds=timeout_s)
    if device == "cuda":
        torch.cuda.set_device(local)
        dist.init_process_group("cuda:nccl,cpu:gloo", timeout=timeout)
        dev = torch.device("cuda", local)
    else:
        dist.init_process_group("gloo", timeout=timeout)
        dev = torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), dev


def gather(obj) -> list:
    import torch.distributed as dist

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def about(dev) -> dict:
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return {"torch": torch.__version__, "device": name, "date": time.ctime()}


def llama(layers, hidden, heads, kv, ffn, vocab):
    """A Llama with random weights, on the CPU: the same seed on every rank."""
    import transformers

    sizes = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads)
    sizes.update(num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab)
    cfg = transformers.LlamaConfig(**sizes, max_position_embeddings=4096, use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def build(cfg: dict, dev, dtype):
    """benchmarks/fsdp_step.py's model (any size), ``fully_shard`` per layer + root."""
    from torch.distributed.fsdp import fully_shard

    model = llama(**cfg).to(device=dev, dtype=dtype)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def train(model, init, compiled, ids, warmup, iters, dev, optimizer="adamw", step_sync="device"):
    """This rank's step times (ms), steady-state peak and warmup losses (no collectives
    besides FSDP2's own, so a rank that fails cannot leave the other in a mismatched one).
    ``optimizer``: for every variant, as fsdp_step.make_optimizer reads it. ``step_sync``: a
    timed step ends when the device is idle (``"device"``) or, as in a loop that logs its loss,
    when ``loss.item()`` returns (``"loss"``: side-stream copies may run on into the next)."""
    from fsdp_step import make_optimizer

    cuda = dev.type == "cuda"
    reset = torch.cuda.reset_peak_memory_stats if cuda else lambda: None
    reset()
    model.load_state_dict(init)
    opt, closers = make_optimizer(model, optimizer, cuda)
    ph = StepPhases(cuda)  # GPU ms per phase (benchmarks/step_phases.py)
    step = functools.partial(ph.lm_step, opt, compiled, ids)
    losses = [step().item() for _ in range(warmup)]
    sync(dev)
    reset()
    ph.start()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        _ = step().item() if step_sync == "loss" else (step(), sync(dev))
        times.append(1e3 * (time.perf_counter() - t0))
    peak, phases = torch.cuda.max_memory_allocated() if cuda else 0, ph.result(step)  # profiled
    for close in closers:  # their hooks off the model the next variant reuses
        close()
    return times, peak, losses, phases


def _reshard(model) -> None:
    """After a failed step: parameters back to their shards, no gradients left."""
    from torch.distributed.fsdp import FSDPModule

    for m in filter(lambda m: isinstance(m, FSDPModule), model.modules()):
        with contextlib.suppress(Exception):
            m.reshard()
    for p in model.parameters():
        p.grad = None


def steps(args) -> None:
    import torch.distributed as dist
    from fsdp_step import memopt_extra, plan_fingerprint

    import memopt

    rank, world, dev = init_dist(args.device, args.pg_timeout)
    if args.memopt_log:  # as fsdp_step's
        import logging

        handler = logging.FileHandler(args.memopt_log + (f".rank{rank}" if rank else ""))
        handler.setFormatter(logging.Formatter("%(relativeCreated)d ms %(message)s"))
        logging.getLogger("memopt").addHandler(handler)
        logging.getLogger("memopt").setLevel(logging.INFO)
    cfg = TINY if args.tiny else FULL
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    model = build(cfg, dev, dtype)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    full = torch.randint(0, cfg["vocab"], (world * args.batch, args.seq), generator=g)
    ids = full[rank * args.batch : (rank + 1) * args.batch].to(dev)
    meta = dict(world=world, global_batch=world * args.batch, **about(dev))
    meta["config"] = {**vars(args), "model": cfg, "dtype": str(dtype)}
    rows: list[dict] = []

    def run(key, label, make, extra=None, memopt_row=False, budget=None):
        compiled, t0 = None, time.time()
        try:
            torch._dynamo.reset()
            if budget is not None:
                torch._functorch.config.activation_memory_budget = budget
            compiled = make()
            got = train(model, init, compiled, ids, args.warmup, args.iters, dev, args.optimizer,
                        args.step_sync)  # fmt: skip
            local = dict(zip(("times", "peak", "losses", "phases"), got))
            if memopt_row:
                local["memopt"] = memopt_extra(compiled)
                local["fingerprint"], local["plan_text"] = plan_fingerprint(compiled)
        except Exception as e:  # out of memory, a compile error: recorded, the next one runs
            local = {"error": f"{type(e).__name__}: {e}"[:2000]}
            _reshard(model)
        finally:
            torch._functorch.config.activation_memory_budget = 1.0
            del compiled
            gc.collect()
            torch.cuda.empty_cache()  # a no-op where CUDA never started
            torch._dynamo.reset()
        ranks = gather(local)  # the one collective per variant, on every path
        row = {"key": key, "variant": label, "budget": budget, **(extra or {})}
        row["wall_s"] = time.time() - t0
        errors = [r.get("error") for r in ranks]
        if any(errors):
            row["error"] = next(e for e in errors if e)
            row["errors_by_rank"] = errors
        else:
            step_ms = [max(ts) for ts in zip(*(r["times"] for r in ranks))]  # slowest rank
            row["ms"] = statistics.median(step_ms)
            row["tokens_per_s"] = world * args.batch * args.seq / (row["ms"] / 1e3)
            row["peaks"] = [r["peak"] for r in ranks]
            row["peak"] = max(row["peaks"])
            row["losses"] = [statistics.fmean(v) for v in zip(*(r["losses"] for r in ranks))]
            row["losses_by_rank"] = [r["losses"] for r in ranks]
            row["step_ms"] = [round(t, 3) for t in step_ms]
            row["phases_by_rank"] = [r.get("phases") for r in ranks]
            if memopt_row:  # plan_text: one text, or one per rank where they differ
                row["plan_fingerprints"] = fps = [r["fingerprint"] for r in ranks]
                row["same_plan_on_ranks"] = len(set(fps)) == 1
                texts = [r["plan_text"] for r in ranks]
                row["plan_text"] = texts[0] if len(set(texts)) == 1 else texts
                row["memopt"] = [r["memopt"] for r in ranks]
        rows.append(row)
        if rank == 0:
            brief = {k: v for k, v in row.items() if k not in ("memopt", "plan_text")}
            print(json.dumps(brief), flush=True)
            with open(args.out, "w") as f:  # after every variant: a cut-off run keeps it
                json.dump({**meta, "rows": rows}, f, indent=1)
        return row

    want = set(args.only.split(",")) if args.only else {"budgets", "level", "offload"}
    plain = functools.partial(torch.compile, model)
    run("compile", "torch.compile", plain)
    peaks = {}
    points = [float(x) for x in args.points.split(",")]
    for b in points if "budgets" in want else ():
        peaks[b] = run(f"torch{b}", f"torch.compile budget={b}", plain, budget=b).get("peak")
    if "level" in want:
        run("level1", "memopt level=1", lambda: memopt.optimize(model, level=1), memopt_row=True)
    if "fused" in want:  # the fused loss alone: what it costs without any recompute
        run("fused", "memopt fuse_loss", lambda: memopt.optimize(model, fuse_loss=True), None, True)
    for text in filter(None, args.targets.split(",")):  # aims given: another run's peaks
        b, _, peak = text.partition("=")
        peaks[float(b)] = int(peak)
    for b, peak in peaks.items():
        if peak is None:  # torch's variant failed: no peak to aim at
            continue
        if peak:
            label, budget, extra = f"memopt budget={peak / GiB:.2f}GiB (torch {b})", int(peak), {}
        else:  # no CUDA peak (CPU): a fractional budget exercises the same step plan code
            label, budget = f"memopt budget=0.5 (torch {b}: no CUDA peak)", 0.5
            extra = {"budget_fallback": "fraction 0.5: torch's peak is 0 without CUDA"}
        extra.update(target=peak, memopt_budget=budget)
        run(f"memopt@{b}", label, lambda budget=budget: memopt.optimize(model, budget=budget),
            extra, memopt_row=True)  # fmt: skip
        if "auto" in want and peak:  # the same budget, the step planner weighing offload too
            auto = functools.partial(memopt.optimize, model, budget=budget, offload_layers="auto")
            run(f"auto@{b}", f"{label} offload_layers=auto", auto, extra, memopt_row=True)
        if "unfused" in want:  # the same budget with the loss left as the model computes it
            unf = functools.partial(memopt.optimize, model, budget=budget, fuse_loss=False)
            run(f"unfused@{b}", f"{label} fuse_loss=False", unf, extra, memopt_row=True)
    for k in (1, 2) if "offload" in want else ():
        kw = {"offload_layers": k}
        if dev.type == "cpu":  # tiny tensors: the default minimum size would skip them
            kw["offload_min_bytes"] = 0
        run(f"offload{k}", f"memopt offload_layers={k}",
            lambda kw=kw: memopt.optimize(model, **kw), {"k": k}, memopt_row=True)  # fmt: skip
    run("compile_end", "torch.compile, again after the others", plain)  # row 1 runs colder
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # the JSON is written; skip NCCL teardown and compile workers' shutdown


def host_bytes(model, opt) -> dict:
    """Pinned and pageable host bytes of this rank's parameter shards and optimizer states."""
    from torch.distributed.tensor import DTensor

    out = {"host_pinned_bytes": 0, "host_pageable_bytes": 0}
    tensors = [p.data for p in model.parameters()]
    tensors += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    for t in tensors:
        t = t.to_local() if isinstance(t, DTensor) else t
        if t.device.type == "cpu":
            key = "host_pinned_bytes" if t.is_pinned() else "host_pageable_bytes"
            out[key] += t.numel() * t.element_size()
    return out


def param_variant(args) -> None:
    import param_peers as pp
    import torch.distributed as dist

    rank, world, dev = init_dist(args.device, args.pg_timeout)
    cuda = dev.type == "cuda"
    s = pp.SIZES[args.size]
    if cuda:
        model = pp.llama(args.size)
    else:  # param_peers without CUDA: its model on the CPU, no GPU to cap, no memory to pin
        import torch.distributed.fsdp as fsdp

        model = llama(s["layers"], s["hidden"], s["heads"], s["heads"] // 4, s["inter"], s["vocab"])
        model.gradient_checkpointing_enable({"use_reentrant": False})

        class Unpinned(fsdp.CPUOffloadPolicy):
            def __init__(self, pin_memory: bool = True):
                super().__init__(pin_memory=False)

        pp.cap_gpu, fsdp.CPUOffloadPolicy = (lambda gib: None), Unpinned
    nparam = sum(p.numel() for p in model.parameters())
    model, opt, extra = pp.setup(args.name, model, args)
    rec = extra.pop("record", None)
    bs = args.bs
    data = pp.batches(args.steps, world * bs, args.seq, s["vocab"])
    losses, times = [], []
    for x in data:
        x = x[rank * bs : (rank + 1) * bs]
        sync(dev)
        t0 = time.perf_counter()
        x = x.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        sync(dev)
        times.append(time.perf_counter() - t0)
    if rec is not None:  # memopt: the placement and host bytes as param_peers records them
        from memopt.params import format_placement

        opt.wait()
        extra["placement"] = format_placement(rec.placement_rows() + opt.placement_rows())
        stats = opt.host_stats()
        extra.update((k, stats[k]) for k in ("host_pinned_bytes", "host_pageable_bytes"))
    else:
        extra.update(host_bytes(model, opt))
    local = dict(rank=rank, threads=torch.get_num_threads(), losses=losses, times=times)
    local["peak_gib"] = torch.cuda.max_memory_allocated() / GiB if cuda else 0.0
    local.update(**pp.host_rss(), **extra)
    ranks = gather(local)
    dist.barrier()  # every rank is done before rank 0 prints and the processes exit
    if rank == 0:
        step_s = [max(ts) for ts in zip(*(r["times"] for r in ranks))]
        s = statistics.median(step_s[3:])
        res = dict(name=args.name, bs=bs, seq=args.seq, world=world, params=nparam)
        res.update(s_per_step=s, tokens_per_s=world * bs * args.seq / s, times=step_s)
        res["peak_gib"] = max(r["peak_gib"] for r in ranks)
        res["cap_gib"] = None if args.name in pp.UNCAPPED else args.cap_gib
        res["losses"] = [statistics.fmean(v) for v in zip(*(r["losses"] for r in ranks))]
        res["ranks"], res["device"] = ranks, about(dev)["device"]
        for key in ("host_pinned_bytes", "host_pageable_bytes", "VmHWM"):
            res[key + "_sum"] = sum(r.get(key, 0) for r in ranks)
        print("RESULT " + json.dumps(res), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip process-group teardown (as param_peers does)


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (torchrun's workers have sessions of their
    own, so its process group would miss them)."""
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(path) as f:
            for child in f.read().split():
                _kill_tree(int(child))
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def launch(args, name: str, bs: int, seq: int) -> dict:
    """One job: torchrun with ``--world`` processes, killed as a group past ``--timeout``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.world)]
    cmd += ["--standalone", os.path.abspath(__file__), "param-variant"]  # a free port
    cmd += ["--name", name, "--bs", str(bs), "--seq", str(seq), "--size", args.size]
    cmd += ["--cap-gib", str(args.cap_gib), "--fraction", str(args.fraction)]
    cmd += ["--steps", str(args.steps), "--device", args.device]
    cmd += ["--pg-timeout", str(args.pg_timeout)]
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    elif args.world > 1 and "OMP_NUM_THREADS" not in os.environ:  # torchrun would set 1
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.world))
    t0 = time.time()
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = p.communicate(timeout=args.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_tree(p.pid)  # torchrun and its workers (they run in sessions of their own)
        out, err = p.communicate(timeout=60)
        timed_out = True
    except BaseException:  # SIGTERM (``timeout`` around the driver), Ctrl-C: no orphans
        _kill_tree(p.pid)
        raise
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if line:
        res = json.loads(line[-1][7:])
    else:
        text = out + err
        oom = "OutOfMemory" in text or "out of memory" in text
        error = "timeout" if timed_out else "OOM" if oom else "failed"
        res = {"name": name, "bs": bs, "seq": seq, "world": args.world, "error": error}
        res["tail"] = text[-3000:]
        res["first_error"] = next((ln for ln in text.splitlines() if "Error" in ln), "")
    res["wall_s"] = time.time() - t0
    return res


def params(args) -> None:
    meta = dict(world=args.world, config=vars(args), torch=torch.__version__, date=time.ctime())
    results: list[dict] = []  # the driver leaves CUDA alone: the device name comes from a job
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs launch's cleanup

    def record(res):
        results.append(res)
        meta["device"] = res.get("device", meta.get("device", "?"))
        head = f"{res['name']} {res['bs']}x{res['seq']} w{args.world} ({res['wall_s']:.0f} s): "
        if "error" in res:
            print(head + f"{res['error']} {res.get('first_error', '')[:300]}", flush=True)
        else:
            host = res["host_pinned_bytes_sum"] / GiB, res["host_pageable_bytes_sum"] / GiB
            print(head + f"{res['s_per_step']:.3f} s/step, {res['tokens_per_s']:.0f} tok/s, "
                  f"peak {res['peak_gib']:.2f} GiB, host pinned {host[0]:.2f} GiB, pageable "
                  f"{host[1]:.2f} GiB (sum over ranks)", flush=True)  # fmt: skip
        with open(args.out, "w") as f:  # after every job: a cut-off run keeps what it has
            json.dump({**meta, "results": results}, f, indent=1)
        return res

    for job in filter(None, args.jobs.split(",")):
        name, shape = job.split(":")
        bs, seq = (int(v) for v in shape.split("x"))
        record(launch(args, name, bs, seq))
    for name in filter(None, args.largest.split(",")):
        for bs in (int(b) for b in args.largest_batches.split(",")):
            res = launch(args, name, bs, args.largest_seq)
            res["largest_search"] = True
            if "error" in record(res):
                break


def _md(title: str, cols: list[str]) -> list[str]:
    return [title, "", f"| {' | '.join(cols)} |", "|" + "---|" * len(cols)]


def _gib(b) -> str:
    return "" if b is None else f"{b / GiB:.2f}"


def steps_table(d: dict, d1: dict | None) -> list[str]:
    by1 = {r["key"]: r for r in (d1 or {}).get("rows", []) if "error" not in r}
    base = next((r for r in d["rows"] if r["key"] == "compile" and "error" not in r), None)
    cols = "variant,step ms,vs compile,tokens/s,max peak GiB per rank,same plan on ranks"
    out = _md(
        f"Steps: {d['device']}, torch {d['torch']}, world {d['world']}, batch "
        f"{d['config']['batch']} per rank x {d['config']['seq']}, {d['date']}",
        cols.split(",") + ["scaling vs 1 GPU", "losses"],
    )
    for r in d["rows"]:
        if "error" in r:
            out.append(f"| {r['variant']} | failed: {r['error'][:80]} | | | | | | |")
            continue
        vs = f"{100 * (r['ms'] / base['ms'] - 1):+.1f}%" if base else ""
        same = {True: "yes", False: "**no**"}.get(r.get("same_plan_on_ranks"), "")
        one = by1.get(r["key"])
        scale = f"{r['tokens_per_s'] / one['tokens_per_s']:.2f}x" if one else ""
        losses = ", ".join(f"{v:.4f}" for v in r["losses"])
        out.append(
            f"| {r['variant']} | {r['ms']:.1f} | {vs} | {r['tokens_per_s']:,.0f} | "
            f"{_gib(r['peak'])} | {same} | {scale} | {losses} |"
        )
    return out


def loss_table(d: dict, c: dict) -> list[str]:
    byc = {r["key"]: r for r in c.get("rows", []) if "error" not in r}
    out = _md(
        f"Losses: world {d['world']} x batch {d['config']['batch']} against world {c['world']} "
        f"x batch {c['config']['batch']} (global batch {d.get('global_batch')} and "
        f"{c.get('global_batch')})",
        ["variant", f"losses world {d['world']}", f"losses world {c['world']}", "max abs diff"],
    )
    for r in d["rows"]:
        other = byc.get(r["key"])
        if "error" in r or other is None:
            continue
        diff = max(abs(a - b) for a, b in zip(r["losses"], other["losses"]))
        a = ", ".join(f"{v:.4f}" for v in r["losses"])
        b = ", ".join(f"{v:.4f}" for v in other["losses"])
        out.append(f"| {r['variant']} | {a} | {b} | {diff:.2g} |")
    return out


def params_table(d: dict, d1: dict | None) -> list[str]:
    def key(r):
        return r["name"], r["bs"], r["seq"]

    by1 = {key(r): r for r in (d1 or {}).get("results", []) if "error" not in r}
    cols = "variant,batch per rank,s/step,global tokens/s,scaling vs 1 GPU,max GPU peak GiB,"
    cols += "host RSS peak GiB per rank,pinned GiB per rank,pageable GiB per rank,"
    cols += "pinned + pageable GiB all ranks,1 GPU: pinned + pageable GiB"
    out = _md(
        f"Parameter offload: {d.get('device')}, torch {d['torch']}, world {d['world']}, GPU capped "
        f"at {d['config']['cap_gib']} GiB per rank, {d['date']}",
        cols.split(","),
    )
    for r in d["results"]:
        shape = f"{r['bs']} × {r['seq']}"
        if "error" in r:
            err = "out of memory" if r["error"] == "OOM" else r["error"]
            out.append(f"| {r['name']} | {shape} | {err} |" + " |" * 8)
            continue
        ranks = r["ranks"]
        one = by1.get(key(r))
        scale = f"{r['tokens_per_s'] / one['tokens_per_s']:.2f}x" if one else ""
        total = r["host_pinned_bytes_sum"] + r["host_pageable_bytes_sum"]
        one_total = _gib(
            one["host_pinned_bytes_sum"] + one["host_pageable_bytes_sum"] if one else None
        )
        per = {
            k: " / ".join(_gib(x.get(k, 0)) for x in ranks)
            for k in ("VmHWM", "host_pinned_bytes", "host_pageable_bytes")
        }
        out.append(
            f"| {r['name']} | {shape} | {r['s_per_step']:.3f} | {r['tokens_per_s']:,.0f} | "
            f"{scale} | {r['peak_gib']:.2f} | {per['VmHWM']} | {per['host_pinned_bytes']} | "
            f"{per['host_pageable_bytes']} | {_gib(total)} | {one_total} |"
        )
    return out


def table(args) -> str:
    def load(path):
        return json.load(open(path)) if path else None

    parts = []
    if args.steps_json:
        d = load(args.steps_json)
        parts.append("\n".join(steps_table(d, load(args.steps_json_1gpu))))
        if args.loss_json_1gpu:
            parts.append("\n".join(loss_table(d, load(args.loss_json_1gpu))))
    if args.params_json:
        parts.append("\n".join(params_table(load(args.params_json), load(args.params_json_1gpu))))
    return "\n\n".join(parts)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    common.add_argument("--pg-timeout", type=int, default=300, help="collective timeout (s)")
    s = sub.add_parser("steps", parents=[common], help="part 1, under torchrun")
    s.add_argument("--out", default="multi_gpu_steps.json")
    s.add_argument("--tiny", action="store_true", help="a tiny Llama (CPU smoke test)")
    for key, (full, tiny) in STEPS_RUN.items():  # --batch: rows per rank
        s.add_argument(f"--{key}", type=int, help=f"default {full}; --tiny {tiny}")
    s.add_argument("--only", help="budgets,level,offload,auto,fused,unfused (compile always runs)")
    s.add_argument("--memopt-log", help="memopt's INFO log (rank r > 0: PATH.rank<r>)")
    s.add_argument("--optimizer", default="adamw", help="adamw, device_overlap, swap:BYTES:L,...")
    s.add_argument("--step-sync", default="device", choices=("device", "loss"), help="see train")
    s.add_argument("--targets", default="", help="POINT=BYTES,...: memopt aims at these peaks")
    s.add_argument("--points", default="0.5,0.1", help="torch's budgets (with budgets)")
    for name, run_help in (("params", "part 2: the driver"), ("param-variant", "under torchrun")):
        p = sub.add_parser(name, parents=[common], help=run_help)
        p.add_argument("--name", default="memopt")
        p.add_argument("--jobs", default="fsdp2:2x512,memopt:2x512,fsdp2:4x1024,memopt:4x1024")
        p.add_argument("--largest", default="fsdp2,memopt", help="variants to grow the batch of")
        p.add_argument("--largest-batches", default="5,6,8,16", help="per rank, ascending")
        p.add_argument("--largest-seq", type=int, default=1024)
        p.add_argument("--world", type=int, default=2)
        p.add_argument("--size", default="1b", choices=("1b", "tiny"))
        for flag, default in (("bs", 2), ("seq", 512), ("steps", 12), ("cap-gib", 3.5)):
            p.add_argument(f"--{flag}", type=type(default), default=default)
        p.add_argument("--fraction", type=float, default=1.0)
        p.add_argument("--options", default="", help="HostAdamW keywords (param_peers)")
        p.add_argument("--timeout", type=int, default=240, help="per job (s)")
        p.add_argument("--threads", type=int, help="OMP_NUM_THREADS per rank (default cores/W)")
        p.add_argument("--out", default="multi_gpu_params.json")
    t = sub.add_parser("table", help="markdown tables from the JSON files")
    for flag in "steps-json steps-json-1gpu loss-json-1gpu params-json params-json-1gpu".split():
        t.add_argument(f"--{flag}")
    args = ap.parse_args(argv)
    if args.mode == "steps":
        for key, (full, tiny) in STEPS_RUN.items():
            if getattr(args, key) is None:
                setattr(args, key, tiny if args.tiny else full)
        steps(args)
    elif args.mode == "params":
        params(args)
    elif args.mode == "param-variant":
        param_variant(args)
    else:
        print(table(args))


if __name__ == "__main__":
    main()
