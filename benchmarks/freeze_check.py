"""A budget plan, frozen to a file and re-applied through MEMOPT_CONFIG without the solver,
gives the same step: same offloaded bytes, same saved bytes, same peak.

    python benchmarks/freeze_check.py --budget 4928556544 --out freeze.json   # on the GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))

from common import add_model_args, hf_model, lm_step, step_stats  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--budget", default="4928556544")
    p.add_argument("--out")
    args = p.parse_args()

    import memopt

    model = hf_model(args.model, args.layers, args.hidden)
    ids = torch.randint(0, 32000, (args.batch, args.seq), device="cuda")

    def measure(compiled) -> dict:
        ms, peak = step_stats(lm_step(model, compiled, ids), warmup=2, iters=8)
        rep = memopt.report(compiled)
        return {
            "ms": ms,
            "peak": peak,
            "offloaded_bytes": rep.offloaded_bytes(),
            "saved_bytes": list(rep.saved_bytes()),
        }

    budget = float(args.budget) if "." in args.budget else int(args.budget)
    torch._dynamo.reset()
    planned = memopt.optimize(model, budget=budget)
    rows = {"planned": measure(planned)}
    plan = next(r.extra["planner"] for r in memopt.report(planned).regions if "planner" in r.extra)
    path = os.path.join(tempfile.mkdtemp(), "frozen.json")
    with open(path, "w") as f:
        json.dump({"config": plan["plan_strings"], "sync": plan["sync"]}, f)
    os.environ["MEMOPT_CONFIG"] = path
    torch._dynamo.reset()
    rows["frozen"] = measure(memopt.optimize(model))
    rows["plan"] = {"config": plan["plan_strings"], "sync": plan["sync"]}
    same = all(rows["planned"][k] == rows["frozen"][k] for k in ("offloaded_bytes", "saved_bytes"))
    rows["same_plan"] = same
    print(json.dumps(rows, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
