"""The CPU zoo under two ways of training no other check covers: ``--mode autocast`` (fp32
weights, ``torch.autocast("cpu", torch.bfloat16)`` around the forward) and ``--mode frozen``
(the first two thirds of the parameters take no gradient, as in LoRA-like fine-tuning).

Per model, one JSON line: the level-0 estimate against the measured bytes of the compiled
regions (``predicted``, ``measured``, ``exact``; ``eager``: what eager code saves); for level 1
(``l1_*``) and ``budget=0.5`` (``budget_*``) the loss and gradients against torch.compile's
(``*_grads``; ``*_err``: the largest relative gradient error, bf16 tolerances under autocast)
and the measured and predicted bytes after the plan (``*_meas``, ``*_pred``); whether every
region's planner called the budget feasible (``budget_feasible``).

    python benchmarks/zoo_modes.py --mode autocast --models llama,vit,bert > out.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memopt  # noqa: E402
from benchmarks.zoo import BY_NAME, _agree, _tensors, build  # noqa: E402
from benchmarks.zoo_models import step_loss  # noqa: E402
from memopt.measure import measure_saved  # noqa: E402


def _freeze(model: torch.nn.Module) -> None:
    params = list(model.parameters())
    for p in params[: len(params) * 2 // 3]:
        p.requires_grad_(False)


def _step(mode: str, model, fn, inputs):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    exclude = [*model.parameters(), *model.buffers(), *_tensors(inputs)]
    ctx = torch.autocast("cpu", torch.bfloat16) if mode == "autocast" else contextlib.nullcontext()
    with ctx:
        loss, saved = measure_saved(lambda: step_loss(fn(**inputs)), exclude)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, saved


def run(mode: str, name: str) -> dict:
    t0 = time.time()
    model, inputs = build(BY_NAME[name], "tiny", "cpu", torch.float32)
    if mode == "frozen":
        _freeze(model)
    dtype = torch.bfloat16 if mode == "autocast" else torch.float32
    torch._dynamo.reset()
    l0, g0, s0 = _step(mode, model, torch.compile(model), inputs)
    row: dict = dict(model=name, mode=mode, measured=s0.compiled, eager=s0.eager)
    for key, kwargs in (("l1", dict(level=1)), ("budget", dict(budget=0.5))):
        torch._dynamo.reset()
        opt = memopt.optimize(model, **kwargs)
        _step(mode, model, opt, inputs)  # a budget's first step may re-plan
        l1, g1, s1 = _step(mode, model, opt, inputs)
        rep = memopt.report(opt)
        pred0, pred1 = rep.saved_bytes()
        if key == "budget":  # every region's planner found a plan within the budget
            plans = [r.extra["planner"] for r in rep.regions if "planner" in r.extra]
            row["budget_feasible"] = bool(plans) and all(p["feasible"] for p in plans)
        ok, err = _agree(l0, g0, l1, g1, dtype)
        row.update({f"{key}_grads": ok, f"{key}_err": err, f"{key}_meas": s1.compiled})
        row[f"{key}_pred"] = pred1
        row.setdefault("predicted", pred0)
    row["exact"] = row["predicted"] == row["measured"]
    row["s"] = round(time.time() - t0, 1)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("autocast", "frozen"), required=True)
    p.add_argument("--models", default="llama,vit,bert,gpt2,t5,resnet,whisper,dit")
    args = p.parse_args()
    for name in args.models.split(","):
        try:
            row = run(args.mode, name)
        except Exception as e:  # one model's failure is a row, the others still run
            row = dict(model=name, mode=args.mode, error=f"{type(e).__name__}: {e}"[:400])
            row["tb"] = traceback.format_exc()[-1500:]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
