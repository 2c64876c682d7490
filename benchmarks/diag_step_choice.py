"""Record the step planner's inputs and answers in a real FSDP2 step (issue 14), to study the
step choice on the menus the device produces.

benchmarks/multi_gpu.py's 8-layer Llama (``fully_shard`` per layer + root) trained under
``memopt.optimize(model, budget=B)`` for each byte budget given; every call of
:func:`memopt.step.choose_with_offload` the step plans make is kept with its arguments (the
step's runs, each region's menu, the target, the measured offsets, the offload layers and
timing) and its answer, written as JSON to ``--out`` (:func:`load` rebuilds the calls'
``memopt.step`` dataclasses)::

    torchrun --standalone --nproc-per-node 1 benchmarks/diag_step_choice.py \
        --budgets 9359453696,7613686272 --out $OUT/step_choice_s29.json
    python benchmarks/diag_step_choice.py --device cpu --tiny --budgets 0.5 --out /tmp/c.json

``--offload-auto`` adds ``offload_layers="auto"`` (the step planner weighs offloading layers).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budgets", required=True, help="comma list: bytes (> 1) or fractions")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--steps", type=int, default=9, help="training steps per budget")
    p.add_argument("--batch", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--offload-auto", action="store_true", help='offload_layers="auto" too')
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")

    import multi_gpu as mg
    import torch
    from fsdp_step import plan_fingerprint

    import memopt
    import memopt.state as st

    records: list[dict] = []
    original = st.choose_with_offload

    def recording(sequence, menus, target, offsets, layers, timing, away=None):
        t = time.perf_counter()
        choice = original(sequence, menus, target, offsets, layers, timing, away)
        records[-1]["calls"].append({
            "sequence": list(sequence),
            "menus": {str(r): [_option(o) for o in m] for r, m in menus.items()},
            "target": target, "offsets": None if offsets is None else list(offsets),
            "layers": [list(x) for x in layers],
            "timing": None if timing is None else _timing(timing),
            "away": None if away is None else {str(i): sorted(a) for i, a in away.items()},
            "choice": {"chosen": {str(i): _option(o) for i, o in choice.chosen.items()},
                       "peak": choice.peak, "feasible": choice.feasible,
                       "overhead_s": choice.overhead_s, "offload_k": getattr(
                           choice.offload, "k", 0)},
            "seconds": time.perf_counter() - t,
        })  # fmt: skip
        return choice

    st.choose_with_offload = recording
    _, _, dev = mg.init_dist(a.device, 300)
    cfg = mg.TINY if a.tiny else mg.FULL
    full = 1 if a.tiny else 0
    batch = a.batch or mg.STEPS_RUN["batch"][full]
    seq = a.seq or mg.STEPS_RUN["seq"][full]
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    model = mg.build(cfg, dev, dtype)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, cfg["vocab"], (batch, seq), generator=torch.Generator().manual_seed(1))
    ids = ids.to(dev)
    for text in a.budgets.split(","):
        budget = int(float(text)) if float(text) > 1 else float(text)
        records.append({"budget": budget, "calls": []})
        torch._dynamo.reset()
        extra = {"offload_layers": "auto"} if a.offload_auto else {}
        compiled = memopt.optimize(model, budget=budget, **extra)
        times, peak, _, phases = mg.train(model, init, compiled, ids, a.steps, 3, dev)
        records[-1].update(peak=peak, ms=sorted(times)[1], plan=plan_fingerprint(compiled)[1])
        records[-1]["phases"] = phases
        print(budget, "peak", peak, "ms", records[-1]["ms"], "calls", len(records[-1]["calls"]))
        del compiled
        torch._dynamo.reset()
        with open(a.out, "w") as f:  # after every budget: a cut-off run keeps it
            json.dump({"device": mg.about(dev), "config": vars(a), "runs": records}, f)


def _timing(t) -> dict:
    d = dataclasses.asdict(t)
    d["tensors"] = {str(k): sorted(v) for k, v in t.tensors.items()}
    return d


def _option(o) -> dict:
    d = dataclasses.asdict(o)
    d["sync"] = {str(k): list(v) for k, v in o.sync.items()}
    return d


def load(path) -> list[dict]:
    """The recorded calls, each with ``menus`` ({region: [Option]}), ``sequence``, ``target``,
    ``offsets`` and the answer's ``choice`` (chosen options by run position)."""
    from memopt.step import Option

    def option(d: dict) -> Option:
        sync = {int(k): tuple(v) for k, v in d.pop("sync").items()}
        return Option(**{**d, "plans": tuple(d["plans"]), "sync": sync})

    calls = []
    for run in json.loads(open(path).read())["runs"]:
        for c in run["calls"]:
            c["menus"] = {int(r): [option(o) for o in m] for r, m in c["menus"].items()}
            c["choice"]["chosen"] = {int(i): option(o) for i, o in c["choice"]["chosen"].items()}
            c["budget"] = run["budget"]
            calls.append(c)
    return calls


if __name__ == "__main__":
    main()
