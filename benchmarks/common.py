"""Shared helpers for the GPU benchmarks: models from Hugging Face configs, timing, memory."""

from __future__ import annotations

import statistics
import time

import torch


def hf_model(kind: str, layers: int, hidden: int, dtype=torch.bfloat16, device="cuda"):
    import transformers

    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            n_layer=layers,
            n_embd=hidden,
            n_head=hidden // 64,
            vocab_size=32000,
            n_positions=4096,
            activation_function="gelu",
            attn_pdrop=0.0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
        )
        model = transformers.GPT2LMHeadModel(cfg)
    elif kind == "llama":
        cfg = transformers.LlamaConfig(
            hidden_size=hidden,
            intermediate_size=int(hidden * 8 / 3) // 64 * 64,
            num_hidden_layers=layers,
            num_attention_heads=hidden // 128,
            num_key_value_heads=hidden // 128,
            vocab_size=32000,
            max_position_embeddings=4096,
        )
        model = transformers.LlamaForCausalLM(cfg)
    else:
        raise ValueError(kind)
    cfg._attn_implementation = "sdpa"
    # training: no KV cache (with it, every layer's keys and values are copied into a cache
    # that outlives the step's forward: +512 MiB on the 8-layer Llama of pareto.py)
    cfg.use_cache = False
    if getattr(model, "loss_type", "") is None:
        # transformers warns inside forward when it cannot name the loss from the class name
        # (GPT2LMHeadModel): a graph break that splits model and loss into two regions
        model.loss_type = "ForCausalLM"
    return model.to(device=device, dtype=dtype)


def add_model_args(p, model: str = "llama") -> None:
    """``--model/--layers/--hidden/--batch/--seq``; defaults: the pareto Llama (8L h2048 4x2048)."""
    p.add_argument("--model", default=model)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)


def lm_step(model, compiled, ids):
    """One training step of a causal LM (no KV cache) as a closure, for timing."""

    def step():
        model.zero_grad(set_to_none=True)
        compiled(input_ids=ids, labels=ids, use_cache=False).loss.backward()

    return step


def gpu_ms(fn, reps: int) -> list[float]:
    """Compute-stream milliseconds of ``fn()`` per repetition (events around it)."""
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return out


def step_stats(step, warmup: int = 3, iters: int = 10):
    """Median step time (ms) and peak allocated bytes of ``step()`` (a full fwd+bwd)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times), torch.cuda.max_memory_allocated()


def kernel_ms(step, n: int = 3) -> tuple[float, float]:
    """(GPU kernel ms, host issue ms) per step of ``step()``: the compute kernels' own time
    over ``n`` profiled steps (no idle gaps, no host; copies left out, which overlap compute
    on a side stream when memopt offloads, so waits for them are not in it either), and the
    median time the host takes to issue a step (until ``step()`` returns, before the GPU
    finishes) over ``n`` steps without the profiler. Where the host's time nears the step's,
    step times measure the host (which varies between processes); kernel time does not."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    host = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        host.append(1e3 * (time.perf_counter() - t0))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    gpu = sum(
        e.self_device_time_total
        for e in prof.key_averages()
        if e.device_type == DeviceType.CUDA
        and e.self_device_time_total > 0
        and not e.key.startswith(("Memcpy", "Memset"))
    )
    return gpu / 1e3 / n, statistics.median(host)


def gib(n) -> str:
    return f"{n / 2**30:.2f}"


def spec_parser(doc: str):
    """argparse for scripts that take a ``memopt plan`` model spec (``hf:gpt2 --config ...``)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("model", help="hf:TYPE or package.module:factory")
    ap.add_argument("--config", nargs="*", default=[], help="key=value model config overrides")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--level", type=int, default=0)
    return ap


def materialize_spec(args, device: str):
    """The spec's model with real random bf16 weights and inputs on ``device`` (seed 0)."""
    from memopt.cli import models

    overrides, _ = models.split_overrides(args.config)
    source = models.resolve(args.model, overrides)
    torch.manual_seed(0)
    return source.materialize(batch=args.batch, seq=args.seq, dtype=torch.bfloat16, device=device)


def memopt_log(prefix=lambda: "", width: int = 300) -> list[str]:
    """memopt's INFO log of this process from now on, one entry per record (``prefix()``
    before it, cut to ``width`` characters): what its step plans measured and re-planned. The
    logger's level drops to INFO where it was higher; nothing is printed."""
    import logging

    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda rec: lines.append(f"{prefix()}{rec.getMessage()}"[:width])
    logger = logging.getLogger("memopt")
    logger.addHandler(handler)
    logger.setLevel(min(logger.level or logging.INFO, logging.INFO))
    return lines


def running_plans(report) -> list[str]:
    """The plan strings of the compiled regions the step runs now (the report's frozen plan:
    a region compiled for a step plan, not the region's first plan). Where no one plan file
    holds them (regions that plan one cluster differently, as BART's graph-broken encoder and
    decoder runs, or offload on different sync dicts), each running region's own, prefixed
    ``region <i>:``."""
    try:
        return list(report.frozen_plan()["config"])
    except ValueError:
        out = []
        for r in report.regions:
            if report.runs(r):
                frozen = r.extra.get("frozen") or {}
                mine = frozen.get("step_config", frozen.get("config", ()))
                out += [f"region {r.index}: {text}" for text in dict.fromkeys(mine)]
        return out
