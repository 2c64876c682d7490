"""Gradients of one zoo model against a float64 eager step: how far torch.compile's, eager
float32's and memopt's (level 1, budget 0.5) are from the float64 truth, per parameter.

Where the zoo's float32 check fails on a GPU (nondeterministic kernels, reduction order), this
tells a wrong gradient (memopt far from the truth where torch.compile is near) from rounding
(memopt as near as torch.compile). ``python benchmarks/diag_grads.py --model levit --device
cuda --out $OUT/grads_levit.json``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import memopt  # noqa: E402
from benchmarks.zoo import BY_NAME, _compiled, build, one_step  # noqa: E402


def errors(grads: dict, truth: dict) -> dict[str, float]:
    """Per parameter, the largest absolute difference from the truth over the largest
    gradient of the model (a parameter whose true gradient is zero, such as a batch norm's
    bias before another batch norm, has only rounding noise: no scale of its own)."""
    scale = max(t.abs().max().item() for t in truth.values()) or 1.0
    return {k: (grads[k].double() - t).abs().max().item() / scale for k, t in truth.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    entry = BY_NAME[a.model]
    model, inputs = build(entry, "tiny", a.device, torch.float32)
    ref = copy.deepcopy(model).double()
    ref_inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    truth = one_step(ref, ref, ref_inputs)[1]
    runs = {
        "eager": one_step(model, model, inputs)[1],
        "torch.compile": one_step(model, _compiled(model), inputs)[1],
        "torch.compile again": None,
        "memopt level 1": one_step(model, _compiled(model, level=1), inputs)[1],
        "memopt budget 0.5": None,
    }
    c = _compiled(model)
    one_step(model, c, inputs)
    runs["torch.compile again"] = one_step(model, c, inputs)[1]
    b = _compiled(model, budget=0.5)
    runs["memopt budget 0.5"] = one_step(model, b, inputs)[1]
    if len(memopt.report(b).regions) > 1:
        runs["memopt budget 0.5"] = one_step(model, b, inputs)[1]
    err = {name: errors(g, truth) for name, g in runs.items()}
    worst = {name: max(e.values()) for name, e in err.items()}
    base = max(worst["eager"], worst["torch.compile"], worst["torch.compile again"])
    rows = sorted(truth, key=lambda k: -err["memopt level 1"][k])[:8]
    result = {
        "model": a.model,
        "device": a.device,
        "torch": torch.__version__,
        "worst": worst,
        "memopt_over_references": {
            n: worst[n] / base if base else None for n in ("memopt level 1", "memopt budget 0.5")
        },
        "largest": {k: {n: err[n][k] for n in err} for k in rows},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
