"""A step option's predicted peak against the model of the plan its compile applied (issue 16).

On an H200 a relaxed ResNet-50 step plan (docs/zoo.md, twenty-fifth session) carried an option
peak of 3,590,211,944 B, while ``memory_profile`` of the decisions its compile applied, on the
same planning problem, gave 3,085,960,914 B and the step measured 3,051,366,400 B. On the CPU
the two agree. This runs the same steps (the model's own plan, a measured probe, the relax,
the relaxed plan's compile) and, for every option the step planner solved
(``memopt.step.exact_option`` and ``region_menu``), prints the solver's peak, the profile of the
solver's own decisions and, for the option the step ran, the profile of the decisions the
compile applied, with every candidate on which the two disagree::

    python benchmarks/diag_option_peak.py --model resnet --budget 3474163712 --out $OUT/o.json

One JSON document; ``--device cpu --size tiny`` checks the script here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet")
    p.add_argument("--size", default="gpu")
    p.add_argument("--device", default="cuda")
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)

    import torch

    import memopt
    import memopt.step as step_mod
    from benchmarks.diag_liveness import _capture
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import api
    from memopt.planner import memory_profile
    from memopt.planner.emit import sync_windows

    solved: list[dict] = []
    real_solve = step_mod.exact_option

    def spy(problem, rates, budget, saved_inputs=0, max_depth=2):
        from memopt.planner import solve

        sol = solve(problem, budget, rates, max_recompute_depth=max_depth)
        solved.append(
            {
                "budget": budget,
                "plans": sorted(sol.plan_strings),
                "solver_peak": sol.predicted_peak,
                "profile_of_solver": memory_profile(problem, sol.decisions).peak,
                "decisions": {k: int(v) for k, v in sol.decisions.items()},
            }
        )
        return real_solve(problem, rates, budget, saved_inputs, max_depth)

    step_mod.exact_option = spy
    import memopt.state as state_mod

    state_mod.exact_option = spy  # the state imported the name
    seen = _capture()
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    m, x = build(BY_NAME[a.model], a.size, a.device, dtype, None)
    c = memopt.optimize(m, budget=a.budget)
    peaks = []
    for _ in range(a.steps):
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        step_loss(c(**x)).backward()
        m.zero_grad(set_to_none=True)
        peaks.append(torch.cuda.max_memory_allocated() if a.device == "cuda" else None)
    st = api._STATES[c]
    problem, plan = seen["problem"], seen["plan"]
    applied = {k: int(v) for k, v in plan.per_root.items() if k in problem.by_name}
    win = sync_windows(plan.sync, problem.timeline) if plan.sync else {}
    option = st.run_plan.get(0)
    out = {
        "model": a.model,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "budget": a.budget,
        "peaks": peaks,
        "option": None if option is None else {"plans": sorted(option.plans), "peak": option.peak},
        "applied_plans": sorted(plan.plan_strings()),
        "profile_of_applied": memory_profile(problem, applied, win).peak,
        "solved": [{k: v for k, v in s.items() if k != "decisions"} for s in solved],
        "sections": [(r.extra.get("inductor") or {}).get("peak") for r in st.regions],
    }
    same = [s for s in solved if option is not None and s["plans"] == sorted(option.plans)]
    if same:
        mine = same[-1]["decisions"]
        names = sorted(set(mine) | set(applied))
        size = {cand.name: cand.nbytes for cand in problem.candidates}
        out["disagree"] = [
            [n, mine.get(n, 0), applied.get(n, 0), size.get(n)]
            for n in names
            if mine.get(n, 0) != applied.get(n, 0)
        ]
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
