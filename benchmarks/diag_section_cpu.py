"""The planner's model against Inductor's buffer plan on the CPU: one training step of a zoo
model (benchmarks/zoo_models.py, fp32) under a budget, then the region report's ``inductor``
section (Inductor's own peak) beside the planner's predicted peak of the same compiled plan.
Where the two agree on the CPU, a miss measured on CUDA comes from what differs there;
``--device cuda`` runs the same check on Inductor's CUDA plan.

    python benchmarks/diag_section_cpu.py --model resnet --size gpu --batch 16 --budget 0.8 \
        --out docs/data/section_cpu_resnet_s24.json

One budget per process (a fresh dynamo state); each run appends one JSON line to ``--out``.
``--inductor KEY=VALUE`` sets an Inductor config value for the run (the thirty-first session's
``reorder_for_peak_memory=False``). ``MEMOPT_FUSION_GUARD=1`` compiles with the fusion guard
(the row's ``fusion_guard``)::

    for g in 0 1; do MEMOPT_FUSION_GUARD=$g python benchmarks/diag_section_cpu.py --model llama \
        --size tiny --batch 4 --budget 0.1 --out docs/data/section_cpu_fusion_s26.json; done
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def run(
    model: str, size: str, batch: int, budget: float, dtype: str = "float32", device: str = "cpu"
) -> dict:
    import torch

    import memopt
    from benchmarks.zoo import BY_NAME, build  # the zoo and the wide zoo
    from benchmarks.zoo_models import step_loss
    from memopt import api

    m, x = build(BY_NAME[model], size, device, getattr(torch, dtype), batch)
    c = memopt.optimize(m, budget=int(budget) if budget > 1 else budget)
    t = time.perf_counter()
    step_loss(c(**x)).backward()
    state = api._STATES[c]
    region = state.regions[0]
    sec, planner = region.extra["inductor"], region.extra.get("planner") or {}
    return {
        "model": model,
        "size": size,
        "batch": batch,
        "dtype": dtype,
        "device": device,
        "budget": budget,
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - t, 1),
        "plan": planner.get("plan_strings"),
        "fusion_guard": state.config.fusion_guard,
        "fusion_guard_auto": region.extra.get("fusion_guard_auto"),
        "fusions_refused": region.extra.get("fusions_refused"),
        "model_peak": planner.get("predicted_peak"),
        "inductor": {
            k: sec.get(k) for k in ("peak", "fwd_peak", "bwd_peak", "static", "peak_unpooled")
        },
        "fwd_at_peak": sec["fwd_at_peak"],
        "bwd_at_peak": sec["bwd_at_peak"],
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet")
    p.add_argument("--size", default="gpu")
    p.add_argument("--batch", type=int, default=16, help="0: the model builder's own")
    p.add_argument("--budget", type=float, default=0.8, help="a fraction, or bytes (> 1)")
    p.add_argument("--dtype", default="float32", help="the weights' and inputs' dtype")
    p.add_argument("--device", default="cpu", help="cuda: the same check of Inductor's CUDA plan")
    p.add_argument("--out", default=None, help="append the JSON line here")
    p.add_argument(
        "--inductor",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an Inductor config setting for the run (repeatable), e.g. "
        "reorder_for_peak_memory=False",
    )
    a = p.parse_args(argv)
    import ast

    import torch._inductor.config as inductor_config

    settings = {}
    for kv in a.inductor:
        key, _, value = kv.partition("=")
        if not hasattr(inductor_config, key):
            p.error(f"--inductor {kv}: torch._inductor.config has no {key!r}")
        settings[key] = ast.literal_eval(value)
    with inductor_config.patch(settings):
        row = run(a.model, a.size, a.batch, a.budget, a.dtype, a.device)
    row["inductor_settings"] = a.inductor
    line = json.dumps(row)
    print(line)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
