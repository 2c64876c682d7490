"""A byte budget's first steps: each step's measured peak against the budget (issue 16).

memopt plans a byte budget on its FX model. Where that model under-predicts the compiled plan,
the first plan overruns the budget until something corrects it: a measured step (CUDA probe,
then a re-plan and a recompile) or, since the twenty-second session, Inductor's buffer plan of
the compiled region, read at the end of the step that compiled it. This script trains a zoo
model (benchmarks/zoo_models.py, bf16) at byte budgets and records, per step, the CUDA peak
(``max_memory_allocated``, reset at each step's start), whether the step compiled (a new
region report), and the step plan's count; one JSON line per (model, budget)::

    python benchmarks/first_steps.py --model vit --budgets 1.8e9,2.2e9 --steps 8
    PYTHONPATH=old python benchmarks/first_steps.py ...    # the same at another commit's memopt

Each (model, budget) runs in its own process so that one allocator history and one compile
cache do not leak into the next.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(a: argparse.Namespace) -> None:
    import torch

    sys.path.append(str(ROOT))  # after PYTHONPATH: another commit's memopt comes first
    import memopt
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat
    from memopt.api import _STATES

    budget = int(float(a.budget))
    steps, histories = [], {}
    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[a.worker], a.size, "cuda", getattr(torch, a.dtype))
        opt = memopt.optimize(model, budget=budget, **json.loads(a.options))
        for i in range(a.steps):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            history = i in a.history
            if history:
                torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="all")
            t0 = time.perf_counter()
            loss = step_loss(opt(**inputs))
            torch.cuda.synchronize()
            fwd_peak = torch.cuda.max_memory_allocated()
            loss.backward()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            if history:
                from benchmarks.diag_liveness import _replay

                snap = torch.cuda.memory._snapshot()
                torch.cuda.memory._record_memory_history(enabled=None)
                histories[i] = _replay(snap, 12)
            state = _STATES[opt]
            rep = memopt.report(opt)
            steps.append(
                {
                    "step": i,
                    "peak": peak,
                    "fwd_peak": fwd_peak,
                    "over_budget": peak / budget - 1,
                    "seconds": round(time.perf_counter() - t0, 3),
                    "reports": len(rep.regions),
                    "runs_report": list(getattr(state, "last_report_step", ())),
                    "step_plans": getattr(state, "_step_plans", None),
                    "inductor_peaks": [
                        (r.extra.get("inductor") or {}).get("peak") for r in rep.regions
                    ],
                    "model_peaks": [
                        (r.extra.get("inductor") or {}).get("model_peak") for r in rep.regions
                    ],
                    "offloads": [bool(r.extra.get("offload")) for r in rep.regions],
                    "inductor_fwd_bwd": [
                        [(r.extra.get("inductor") or {}).get(k) for k in ("fwd_peak", "bwd_peak")]
                        for r in rep.regions
                    ],
                }
            )
            print(f"step {i}: peak {peak / 1e9:.3f} GB ({100 * (peak / budget - 1):+.2f}% of "
                  f"the budget), {len(rep.regions)} report(s)", file=sys.stderr, flush=True)  # fmt: skip
    out = {
        "model": a.worker,
        "size": a.size,
        "budget": budget,
        "options": json.loads(a.options),
        "memopt": memopt.__file__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "steps": steps,
        "over_steps": sum(s["peak"] > budget for s in steps),
        "histories": histories,
    }
    print("@@first " + json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit")
    ap.add_argument("--budgets", default="1.8e9")
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--options", default="{}", help="memopt.optimize keywords, JSON")
    ap.add_argument("--history", default="", help="steps whose allocator history to replay")
    ap.add_argument("--worker", default=None)
    ap.add_argument("--budget", default=None)
    a = ap.parse_args()
    a.history = {int(x) for x in a.history.split(",") if x}
    if a.worker:
        worker(a)
        return
    rows = []
    for name in a.model.split(","):
        for b in a.budgets.split(","):
            cmd = [sys.executable, __file__, "--worker", name, "--budget", b, "--size", a.size]
            cmd += ["--dtype", a.dtype, "--steps", str(a.steps), "--options", a.options]
            cmd += ["--history", ",".join(map(str, sorted(a.history)))]
            p = subprocess.run(cmd, capture_output=True, text=True)
            got = [ln for ln in p.stdout.splitlines() if ln.startswith("@@first ")]
            row = json.loads(got[-1][8:]) if got else {"model": name, "budget": b,
                                                       "error": p.stderr[-2000:]}  # fmt: skip
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
            for s in row.get("steps", []):
                print(f"  step {s['step']}: {100 * s['over_budget']:+.2f}% of the budget, "
                      f"{s['reports']} report(s)", flush=True)  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
