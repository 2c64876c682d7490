"""CPU seconds of the step planner's re-plans on issue 14's FSDP2 Llama (CPU, world size 1).

On an H200 a step's second plan (after its first measured step placed Inductor's excess in
the regions' problems) took about 50 s (docs/data/logs/memopt_w1_s47.log: "planning the step
again" at 163.7 s, the plan at 213.3 s). This reproduces that planning on the CPU: the same
8-layer Llama (``multi_gpu.FULL``, ``fully_shard`` per layer + root) at a small batch, planned
under a byte budget; after two steps the step is planned again as it is (``plain``), then
with an excess placed in each region at its plan's peak (300 MB in the first run's region,
4 MB in the others: the sizes the H200's log shows) the way ``memopt.step_excess.check``
places a measured one (``placed``), then once more with nothing new (``placed, again``: a
later re-plan). Wall seconds of ``MemoptState.plan_step``; planning only, no compile. ::

    python benchmarks/replan_time.py --out replan_time.json       # ~3 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--budget", type=int, default=650_000_000, help="bytes")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch.distributed as dist
    from multi_gpu import FULL, build

    import memopt
    from memopt import step_excess
    from memopt.api import _STATES

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=0, world_size=1)
    cfg = dict(FULL, layers=args.layers)
    torch.manual_seed(0)
    model = build(cfg, torch.device("cpu"), torch.float32)
    ids = torch.randint(0, cfg["vocab"], (1, args.seq))
    opt = memopt.optimize(model, budget=args.budget)
    for _ in range(2):
        opt(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)
    st = _STATES[opt]
    seq = list(st.last_step)

    def timed() -> float:
        t0 = time.perf_counter()
        st.plan_step(seq)
        return round(time.perf_counter() - t0, 3)

    rows = {"plain": timed()}
    for p, r in enumerate(seq):  # one excess per region, at its chosen option's peak
        if r in st._compiled_at:
            continue
        rp, o = st.problems[r], st.run_plan[p]
        curve = step_excess.profile(rp.problem, o).curve
        pos = max(range(len(curve)), key=curve.__getitem__)
        n = 300_000_000 if p == 0 else 4_000_000
        sig = step_excess.signature(rp.problem, o.decisions, pos, n)
        st._compiled_at.setdefault(r, {})[(pos, sig)] = n
        st._compiled_num.setdefault(r, {})[sig] = n // 2
    rows["placed"] = timed()
    rows["placed, again"] = timed()
    here = os.path.dirname(os.path.abspath(__file__))
    rev = subprocess.run(
        ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    out = {
        "command": "python benchmarks/replan_time.py " + " ".join(argv or sys.argv[1:]),
        "memopt": os.environ.get("MEMOPT_COMMIT") or rev.stdout.strip(),
        "torch": torch.__version__,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "config": {**vars(args), "model": cfg, "regions": len(set(seq)), "runs": len(seq)},
        "plan_step_s": rows,
    }
    print(json.dumps(out), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
