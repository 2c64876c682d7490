"""The planner's model against Inductor's buffer plan, per region of an FSDP2 step (issue 14).

benchmarks/fsdp_step.py's Llama (HF, ``fully_shard`` per layer + root, one compiled region per
layer) at world size 1 on the CPU (gloo; ``--device cuda``: NCCL on one GPU, at any size), under
a memopt budget: for each region compiled, the model's peak of the plan it applied with the
largest values live there, beside Inductor's peak of the same graphs with the buffers live at
its peak. ``--code DIR`` keeps Inductor's generated wrappers (``output_code``) to name the
buffers::

    python benchmarks/diag_fsdp_section.py --budget 0.3 --dtype bfloat16 --code /tmp/code \
        --out /tmp/fsdp_section.json
    python benchmarks/diag_fsdp_section.py --device cuda --layers 2 --hidden 2048 --heads 32 \
        --kv 8 --ffn 8192 --vocab 32000 --batch 4 --seq 2048 --budget 1.0 --code $OUT/code
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=0.3, help="a fraction, or bytes (> 1)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv", type=int, default=2)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--no-fsdp", action="store_true", help="plain per-model compile")
    p.add_argument("--code", help="keep Inductor's output code under this folder")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.code:
        os.environ["TORCH_LOGS_OUT"] = str(Path(a.code) / "output_code.txt")
        Path(a.code).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")

    import torch
    import torch.distributed as dist

    import memopt
    from benchmarks.diag_liveness import _capture, _prediction

    if a.code:
        torch._logging.set_logs(output_code=True)
    dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=0, world_size=1)
    seen: list = []  # one record per region planned, in compile order
    _capture(seen)
    from benchmarks.fsdp_step import build

    cfg = dict(vars(a), fsdp=not a.no_fsdp)
    dims = (a.layers, a.hidden, a.heads, a.kv, a.ffn)
    model = build(
        *dims, vocab=a.vocab, device=a.device, dtype=getattr(torch, a.dtype), shard=cfg["fsdp"]
    )
    c = memopt.optimize(model, budget=int(a.budget) if a.budget > 1 else a.budget)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=torch.Generator().manual_seed(1))
    ids = ids.to(a.device)
    for _ in range(a.steps):
        c(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)
    from memopt import api

    state = api._STATES[c]
    # a step plan's variant of a region: its option's peak is the model of the plan it applied
    options = {ri: state.run_plan.get(pos) for pos, ri in enumerate(state.last_report_step)}
    rows = []
    for i, region in enumerate(state.regions):
        sec = dict(region.extra.get("inductor") or {})
        sec.pop("text", None)
        row = {"region": i, "inductor": sec}
        # regions compiled later for a step plan's variants plan no new problem: no model row
        if i < len(seen) and "plan" in seen[i]:
            row["model"] = _prediction(seen[i], a.top)
        if (o := options.get(i)) is not None:
            row["option"] = {"peak": o.peak, "plans": sorted(o.plans), "label": o.label}
        rows.append(row)
        model_peak = (row.get("model") or {}).get("peak")
        option_peak = (row.get("option") or {}).get("peak")
        print(f"region {i}: inductor {sec.get('peak')} model {model_peak} option {option_peak}")
    out = {"config": cfg, "torch": torch.__version__, "regions": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
