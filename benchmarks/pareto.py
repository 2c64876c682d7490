"""Memory/time front: eager, checkpointing, torch.compile (+ activation_memory_budget) and
memopt (level 1 and budgets aimed at each of torch's peaks), on a Hugging Face config.

    python benchmarks/pareto.py gpt2 --out pareto_gpt2.json      # on the GPU
    python benchmarks/pareto.py --plot pareto_gpt2.json pareto_llama.json --png docs/pareto.png
    # memopt only (after a planner change): torch.compile and memopt's budgets are measured
    # again, the other rows (and the torch peaks that set memopt's budgets) are taken from a
    # previous full run on the same device and torch, marked "reused"
    python benchmarks/pareto.py llama --reuse docs/data/pareto_llama.json --out new.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

CONFIGS = {"gpt2": ("gpt2", 12, 768, 8, 1024), "llama": ("llama", 8, 2048, 4, 2048)}


def measure(kind: str, out: str, reuse: str | None = None, batch: int | None = None) -> None:
    from common import hf_model, step_stats

    import memopt

    name, layers, hidden, default_batch, seq = CONFIGS[kind]
    batch = batch or default_batch
    model = hf_model(name, layers, hidden)
    ids = torch.randint(0, 32000, (batch, seq), device="cuda")
    rows = []

    def save():
        config = (name, layers, hidden, batch, seq)
        meta = {"model": kind, "config": config, "torch": torch.__version__}
        with open(out, "w") as f:
            json.dump({**meta, "device": torch.cuda.get_device_name(), "rows": rows}, f)

    def run(label, compiled, extra=None):
        def step():
            model.zero_grad(set_to_none=True)
            compiled(input_ids=ids, labels=ids, use_cache=False).loss.backward()

        ms, peak = step_stats(step, warmup=2, iters=8)
        row = {"variant": label, "ms": ms, "peak": peak, **(extra or {})}
        rows.append(row)
        print(json.dumps(row), flush=True)
        save()

    old = None
    if reuse:
        old = json.load(open(reuse))
        if old["model"] != kind or old["torch"] != torch.__version__ or old["config"][3] != batch:
            raise SystemExit(f"--reuse {reuse}: another model or torch ({old['torch']})")
    if old is None:
        run("eager", model)
        model.gradient_checkpointing_enable()
        run("eager + per-layer checkpointing", model)
        model.gradient_checkpointing_disable()
    torch._dynamo.reset()
    run("torch.compile", torch.compile(model))
    torch_peaks = []
    if old is not None:
        reused = [r for r in old["rows"] if r["variant"] != "torch.compile"]
        reused = [r for r in reused if not r["variant"].startswith("memopt budget")]
        rows[:0] = [{**r, "reused": reuse} for r in reused if r["variant"].startswith("eager")]
        for r in reused:
            if not r["variant"].startswith("eager"):
                rows.append({**r, "reused": reuse})
        torch_peaks = [r["peak"] for r in reused if "budget" in r]
    else:
        for b in (0.8, 0.5, 0.3, 0.1):
            torch._dynamo.reset()
            torch._functorch.config.activation_memory_budget = b
            run(f"torch.compile budget={b}", torch.compile(model), {"budget": b})
            torch_peaks.append(rows[-1]["peak"])
        torch._functorch.config.activation_memory_budget = 1.0
        torch._dynamo.reset()
        c = memopt.optimize(model, level=1)
        run("memopt level=1", c)
    for b, peak in zip((0.8, 0.5, 0.3, 0.1), torch_peaks):
        torch._dynamo.reset()
        c = memopt.optimize(model, budget=int(peak))
        run(f"memopt budget={peak / 2**30:.2f}GiB (torch {b})", c, {"target": peak})
        reg = memopt.report(c).regions
        plans = [{k: v for k, v in r.extra.get("planner", {}).items() if k != "text"} for r in reg]
        rows[-1]["predicted_peaks"] = [p.get("predicted_peak") for p in plans]
        rows[-1]["planner"] = plans
        print(json.dumps(plans), flush=True)
        save()


def table(path: str) -> str:
    d = json.load(open(path))
    rows = d["rows"]
    base = next(r for r in rows if r["variant"] == "torch.compile")
    out = [
        f"{d['model']} {d['config']} — {d['device']}, torch {d['torch']}",
        "",
        "| variant | peak GiB | step ms | overhead vs compile |",
        "|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['variant']} | {r['peak'] / 2**30:.2f} | {r['ms']:.1f} | "
            f"{100 * (r['ms'] / base['ms'] - 1):+.1f}% |"
        )
    return "\n".join(out)


def plot(paths: list[str], png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(paths), figsize=(6 * len(paths), 4.5))
    axes = axes if len(paths) > 1 else [axes]
    for ax, path in zip(axes, paths):
        d = json.load(open(path))
        groups = {"torch.compile budget": [], "memopt": [], "other": []}
        for r in d["rows"]:
            key = (
                "torch.compile budget"
                if r["variant"].startswith("torch.compile")
                else "memopt"
                if r["variant"].startswith("memopt")
                else "other"
            )
            groups[key].append((r["peak"] / 2**30, r["ms"], r["variant"]))
        for key, style in (("torch.compile budget", "o-"), ("memopt", "s-"), ("other", "^")):
            pts = sorted(groups[key])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=key)
                for x, y, label in pts:
                    ax.annotate(
                        label.replace("torch.compile ", "").replace("memopt ", ""),
                        (x, y),
                        fontsize=6,
                    )
        ax.set_xlabel("peak memory (GiB)")
        ax.set_ylabel("median step (ms)")
        ax.set_title(f"{d['model']} {d['config'][1]}L h{d['config'][2]} — {d['device']}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?", choices=sorted(CONFIGS))
    p.add_argument("--out")
    p.add_argument("--plot", nargs="*")
    p.add_argument("--png", default="docs/pareto.png")
    p.add_argument("--reuse", help="a previous run's JSON: measure only compile and memopt")
    p.add_argument("--batch", type=int, help="batch size (default: the model's in CONFIGS)")
    args = p.parse_args()
    if args.plot:
        for path in args.plot:
            print(table(path) + "\n")
        plot(args.plot, args.png)
    else:
        measure(args.model, args.out or f"pareto_{args.model}.json", args.reuse, args.batch)


if __name__ == "__main__":
    main()
