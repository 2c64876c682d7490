"""Step plans under FSDP2 on one GPU: a Llama-style model sharded with ``fully_shard`` per layer
+ root at world size 1 (what per-layer hooks do to a compiled step: one region per layer),
AdamW(fused) in the step. Side by side in one process: eager FSDP2, torch.compile (+ its
``activation_memory_budget`` 0.5 and 0.1), memopt level 1, memopt budgets at torch's peaks and
at 0.6, and memopt ``offload_layers=1,2``.

    torchrun --nproc-per-node 1 benchmarks/fsdp_step.py --out docs/data/fsdp_step.json
    python benchmarks/fsdp_step.py --table docs/data/fsdp_step.json

Each variant starts from the same weights and optimizer state; the losses of its first three
steps are recorded (they must agree across variants within bf16 noise).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))


def build(
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    ffn: int,
    vocab: int = 32000,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    shard: bool = True,
):
    import transformers
    from torch.distributed.fsdp import fully_shard

    cfg = transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
        max_position_embeddings=4096,
        use_cache=False,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype)
    if shard:
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    return model


def run_variant(model, init, compiled, ids, warmup=5, iters=8):
    torch.cuda.reset_peak_memory_stats()  # each variant as a fresh process would see it
    model.load_state_dict(init)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):  # step plans settle within the first steps
        losses.append(step().item())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times), torch.cuda.max_memory_allocated(), losses, times


def live_at_peak(model, compiled, ids, top=20) -> dict:
    """One more step under the allocator's history (Python stacks): the replayed peak and the
    largest groups of blocks live there, by the frame that allocated them."""
    import collections

    from diag_peak import replay

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    opt.zero_grad(set_to_none=True)
    compiled(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    best, blocks = replay(snap, base)
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for size, where in blocks:
        groups[where].append(size)
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "base": base,
        "peak": best,
        "groups": [[sum(v), len(v), where] for where, v in rows],
    }


def memopt_extra(compiled) -> dict:
    import memopt

    rep = memopt.report(compiled)
    step = rep.step
    before, after = rep.saved_bytes()
    return {
        "regions": len(rep.regions),
        "fused_losses": [
            f for r in rep.regions for f in (r.extra.get("fused_loss") or {}).get("losses", ())
        ],
        "sequence": list(step.sequence) if step else None,
        "predicted_step_peak": step.peak if step else None,
        "step_target": step.target if step else None,
        "feasible": step.feasible if step else None,
        "saved_before": before,
        "saved_after": after,
        "offloaded_bytes": rep.offloaded_bytes(),
        "offload_runs": list(step.offload_runs) if step else [],
        "prefetched": step.prefetched if step else 0,
        "notes": list(step.notes) if step else [],
        "measured_peak_seen": step.measured_peak if step else None,
        "predicted_overhead_s": step.overhead_s if step else None,
        "overhead_floor_s": step.overhead_floor_s if step else None,  # memopt.step_bounds
        "offload_by": step.offload_by if step else "",
        "kernels_timed": [r.extra.get("planner", {}).get("kernels_timed") for r in rep.regions],
    }


def make_optimizer(model, optimizer: str, cuda: bool):
    """The step's optimizer and what closes it: ``"adamw"`` (fused on CUDA);
    ``"device_overlap"``: memopt's HostAdamW updating each device shard as its group's
    gradients land, freeing them (memopt.params.device_overlap); ``"swap:BYTES:LAYER"``: AdamW
    with memopt.params.StateSwap (BYTES of its moments away from the first LAYER's forward on,
    or ``auto``; LAYER is a comma-separated list of layer indices in backward order, each
    layer's backward bringing back its share, or ``all``: every layer, ``model=``)."""
    from memopt.errors import ConfigError
    from memopt.params import HostAdamW, StateSwap

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    if optimizer == "device_overlap":
        kw = dict(overlap=True, device_overlap=True, model=model)
        opt = HostAdamW(model.parameters(), lr=1e-4, **kw)
        return opt, [opt.close]
    if optimizer.startswith("swap:"):
        nbytes, layers = optimizer.split(":")[1:]
        size = nbytes if nbytes == "auto" else int(nbytes)
        if layers == "all":
            swap = StateSwap(opt, model=model, max_bytes=size)
        else:
            points = [model.model.layers[int(i)] for i in layers.split(",")]
            swap = StateSwap(opt, reload_at=points, max_bytes=size)
        return opt, [swap.close]
    if optimizer != "adamw":
        raise ConfigError(f"--optimizer {optimizer!r}: adamw, device_overlap or swap:BYTES:L,...")
    return opt, []


def plan_fingerprint(compiled) -> tuple[str, str]:
    """The step plan as chosen: per run of the step, the plan strings its region was compiled
    with, the offloaded runs and the target; a short hash and the text."""
    import memopt
    from memopt.report import _frozen_config

    rep = memopt.report(compiled)
    step, by_index = rep.step, {r.index: r for r in rep.regions}
    seq = [i for i in getattr(step, "sequence", ()) if i in by_index]
    plan = {"runs": [sorted(_frozen_config(by_index[i])) for i in seq]}
    for key in ("offload_runs", "planned_offload_layers", "target", "feasible"):
        plan[key] = getattr(step, key, None)
    text = json.dumps(plan, sort_keys=True, default=list)
    return hashlib.sha1(text.encode()).hexdigest()[:12], text


def measure(args) -> None:
    import torch.distributed as dist

    import memopt

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    model = build(args.layers, args.hidden, args.heads, args.kv, args.ffn)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 32000, (args.batch, args.seq), device="cuda")
    rows: list[dict] = []
    meta = {
        "config": vars(args),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d"),
    }

    def run(label, make, extra=None, memopt_row=False):
        torch._dynamo.reset()
        compiled = make()
        ms, peak, losses, times = run_variant(model, init, compiled, ids, warmup=args.warmup)
        row = {"variant": label, "ms": ms, "peak": peak, "losses": losses, **(extra or {})}
        row["step_ms"] = [round(t, 2) for t in times]
        if memopt_row:
            row.update(memopt_extra(compiled))
        if args.snapshot and (memopt_row or args.snapshot == "all"):
            row["live_at_peak"] = live_at_peak(model, compiled, ids)
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)

    only = set(args.only.split(",")) if args.only else None

    def want(key):
        return only is None or key in only

    if want("eager"):
        run("eager FSDP2", lambda: model)
    run("torch.compile", lambda: torch.compile(model))
    peaks = {}
    for b in (0.5, 0.1) if want("budgets") else ():
        torch._functorch.config.activation_memory_budget = b
        run(f"torch.compile budget={b}", lambda: torch.compile(model), {"budget": b})
        peaks[b] = rows[-1]["peak"]
    torch._functorch.config.activation_memory_budget = 1.0
    if want("level"):
        run("memopt level=1", lambda: memopt.optimize(model, level=1), memopt_row=True)
    for b, peak in peaks.items():
        run(
            f"memopt budget={peak / 2**30:.2f}GiB (torch {b})",
            lambda peak=peak: memopt.optimize(model, budget=int(peak)),
            {"target": peak},
            memopt_row=True,
        )
        # the same budget priced by the roofline alone / with offload switched off
        for on, suffix, off in (
            (args.roofline_too, "roofline", "time_kernels"),
            (args.recompute_only_too, "no offload", "offload"),
        ):
            if on:
                run(
                    f"memopt budget={peak / 2**30:.2f}GiB (torch {b}), {suffix}",
                    lambda peak=peak, off=off: memopt.optimize(
                        model, budget=int(peak), disable_passes=(off,)
                    ),
                    {"target": peak},
                    memopt_row=True,
                )
    if want("fraction"):
        run("memopt budget=0.6", lambda: memopt.optimize(model, budget=0.6), memopt_row=True)
    for k in (1, 2) if want("offload") else ():
        run(
            f"memopt offload_layers={k}",
            lambda k=k: memopt.optimize(model, offload_layers=k),
            {"k": k},
            memopt_row=True,
        )


def table(path: str) -> str:
    d = json.load(open(path))
    base = next(r for r in d["rows"] if r["variant"] == "torch.compile")
    out = [
        f"{d['device']}, torch {d['torch']}, {d['date']}: {d['config']}",
        "",
        "| variant | step ms | vs compile | peak GiB | predicted step peak | loss (step 3) |",
        "|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        pred = r.get("predicted_step_peak")
        out.append(
            f"| {r['variant']} | {r['ms']:.1f} | {100 * (r['ms'] / base['ms'] - 1):+.1f}% | "
            f"{r['peak'] / 2**30:.2f} | {'' if pred is None else f'{pred / 2**30:.2f}'} | "
            f"{r['losses'][-1]:.4f} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="fsdp_step.json")
    p.add_argument("--table")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv", type=int, default=8)
    p.add_argument("--ffn", type=int, default=8192)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument(
        "--only", help="comma-separated: eager,budgets,level,fraction,offload (default: all)"
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument(
        "--recompute-only-too",
        action="store_true",
        help="each memopt budget also with disable_passes=('offload',) (recompute only)",
    )
    p.add_argument(
        "--roofline-too",
        action="store_true",
        help="each memopt budget also with disable_passes=('time_kernels',) (roofline costs)",
    )
    p.add_argument(
        "--snapshot",
        choices=("memopt", "all"),
        help="after timing, one step under the allocator's history: what is live at its peak",
    )
    p.add_argument("--memopt-log", help="write memopt's INFO log (step plans, recompiles) here")
    args = p.parse_args()
    if args.memopt_log:
        import logging

        handler = logging.FileHandler(args.memopt_log)
        handler.setFormatter(logging.Formatter("%(relativeCreated)d ms %(message)s"))
        logging.getLogger("memopt").addHandler(handler)
        logging.getLogger("memopt").setLevel(logging.INFO)
    if args.table:
        print(table(args.table))
    else:
        measure(args)


if __name__ == "__main__":
    main()
