"""What is live at a zoo model's measured peak under a memopt budget, against memopt's
predicted peak (issue 16: Mistral at torch's 0.1 point measured 137-217 MB over the planner's
model with a plan that offloads 738 MB, forty-second session).

Builds the zoo model at its GPU size (benchmarks/zoo_models.py), trains it under
``memopt.optimize(model, budget=...)`` for ``--warmup`` steps (the step plans settle), then
records the CUDA allocator's history over one step and replays it (benchmarks/diag_peak.py):
the peak, the blocks live there grouped by the frame that allocated them (Inductor's buffer
names, memopt's offload ops), and the step's predicted and measured peaks from memopt's
report. ::

    python benchmarks/diag_zoo_peak.py --model mistral --budget 6699150848 --json $OUT/peak.json
    python benchmarks/diag_zoo_peak.py --model mamba2 --offload 4 --json $OUT/peak.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)


def main(argv=None) -> None:
    import torch

    import memopt
    from benchmarks.diag_peak import replay
    from benchmarks.zoo import build
    from benchmarks.zoo_gpu import _memopt_facts
    from benchmarks.zoo_models import BY_NAME, step_loss

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mistral")
    ap.add_argument("--budget", default="none", help="bytes, or a fraction as memopt takes it")
    ap.add_argument("--offload", type=int, default=0, help="offload_layers (0: none)")
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    budget: float | int | None = None if args.budget == "none" else float(args.budget)
    budget = int(budget) if budget is not None and budget > 1 else budget
    model, inputs = build(BY_NAME[args.model], "gpu", "cuda", torch.bfloat16)
    settings = {"budget": budget} if budget is not None else {}
    settings.update({"offload_layers": args.offload} if args.offload else {})
    compiled = memopt.optimize(model, **settings)  # neither: level 0, torch.compile's plan

    def step():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        step_loss(compiled(**inputs)).backward()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(
        max_entries=2_000_000, stacks="all"
    )  # the backward's thread has no Python frames
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = torch.cuda.max_memory_allocated()
    best, blocks = replay(snap, base)
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for size, where in blocks:
        groups[where].append(size)
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    facts = _memopt_facts(compiled)
    out = {
        "model": args.model,
        "budget": budget,
        "offload_layers": args.offload,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "memopt_commit": os.environ.get("MEMOPT_COMMIT"),
        "max_memory_allocated": peak,
        "allocated_before_step": base,
        "replayed_peak": best,
        "predicted_peak": facts.get("predicted_peak"),
        "step_plans": facts.get("step_plans"),
        "offloaded_bytes": facts.get("offloaded_bytes"),
        "plan_strings": facts.get("plan_strings"),
        "sync": facts.get("sync"),
        "live_at_peak": [
            {"bytes": sum(s), "blocks": len(s), "where": w} for w, s in rows[: args.top]
        ],
        "report": str(memopt.report(compiled)),
    }
    pred = out["predicted_peak"]
    print(f"{args.model} budget {budget} offload {args.offload}: measured peak {peak:,} (replayed {best:,}); "
          f"predicted {pred if pred is None else f'{pred:,}'}; before the step {base:,}")  # fmt: skip
    for r in out["live_at_peak"]:
        print(f"  {r['bytes'] / 2**20:10.1f} MiB  x{r['blocks']:<3} {r['where']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
