"""Save the budget planner's problems as the device priced them, to study the solver off the device.

Builds a zoo model at its GPU size (benchmarks/zoo_models.py), compiles it with
``memopt.optimize(budget=...)``, runs ``--steps`` training steps (the step plan and its re-plans
happen there) and pickles, per compiled region, the planning problem (plain data), the device
rates it was priced with (kernel times included), the saved-input bytes and the chain depth,
with the step plan's choice. ``memopt.planner.solve`` takes them back::

    python benchmarks/diag_problem_dump.py --model resnet --budget 3205424128 --out $OUT/rn.pkl
    python -c "import pickle; from memopt.planner import solve; d = pickle.load(open('rn.pkl', 'rb'));
               p = d['regions'][0]; print(solve(p['problem'], 3205424128, p['rates']).describe())"
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)


def main(argv=None) -> None:
    import torch

    import memopt
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt import _torch_compat as compat
    from memopt.api import _STATES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet")
    ap.add_argument("--budget", type=int, required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[args.model], "gpu", "cuda", torch.bfloat16)
        compiled = memopt.optimize(model, budget=args.budget)
        peaks = []
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            torch.cuda.reset_peak_memory_stats()
            step_loss(compiled(**inputs)).backward()
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated())
    state = _STATES[model]
    regions = {}
    for i, rp in state.problems.items():
        regions[i] = {
            "problem": rp.problem,
            "rates": rp.rates,
            "saved_input_bytes": rp.saved_input_bytes,
            "max_depth": rp.max_depth,
            "device_type": rp.device_type,
        }
    choice = state.step_choice
    out = {
        "model": args.model,
        "budget": args.budget,
        "peaks": peaks,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "regions": regions,
        "step_choice": None
        if choice is None
        else {
            "target": choice.target,
            "peak": choice.peak,
            "overhead_s": choice.overhead_s,
            "chosen": {k: v.to_dict() for k, v in choice.chosen.items()},
        },  # fmt: skip
        "report": str(memopt.report(compiled)),
    }
    Path(args.out).write_bytes(pickle.dumps(out))
    print("peaks", peaks, "regions", list(regions), "choice", out["step_choice"])


if __name__ == "__main__":
    main()
