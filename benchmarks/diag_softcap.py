"""Gemma 2's soft-capped logits on the CPU with the GPU's realize thresholds: memopt's plan,
its model and Inductor's buffer plan of the backward.

On an H200 memopt stays infeasible on Gemma 2 at torch's 0.3 point: Inductor realizes the
loss gradient through the logit soft-cap as a new logits-sized buffer at the backward's first
kernel, which the planner's model fuses (docs/zoo.md, forty-third and forty-fifth sessions).
The CPU does the same with the GPU's thresholds (30 ops, 8 reads). This builds the zoo's tiny
Gemma 2 in bf16 with an 8,192-token vocabulary (one logits tensor: 4 x 128 x 8192 x 2 bytes),
runs one or more training steps under memopt with a byte budget and/or plan strings, and
prints per region the planner's prediction and Inductor's peaks and live buffers::

    python benchmarks/diag_softcap.py --budget 34000000
    python benchmarks/diag_softcap.py --budget 34000000 --config "Div+Tanh+Mul+:1:-1"

A fresh ``TORCHINDUCTOR_CACHE_DIR`` per run: a warm cache skips the partitioner.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build(vocab: int = 8192):
    import torch
    import transformers as tf

    from benchmarks.zoo_models import _DEC_TINY, _lm_inputs, _training

    torch.manual_seed(0)
    cfg = tf.Gemma2Config(**{**_DEC_TINY, "head_dim": 16, "sliding_window": 8, "vocab_size": vocab})
    for key in ("attention_dropout", "hidden_dropout"):
        if hasattr(cfg, key):
            setattr(cfg, key, 0.0)
    model = _training(tf.Gemma2ForCausalLM(cfg)).to(dtype=torch.bfloat16)
    return model, _lm_inputs(vocab, 4, 128)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, help="memopt's byte budget")
    p.add_argument("--config", help="plan strings (comma-separated)")
    p.add_argument("--steps", type=int, default=1, help="training steps (re-plans need more)")
    p.add_argument("--cpu-thresholds", action="store_true", help="keep the CPU's (50, 12)")
    args = p.parse_args(argv)

    import torch
    import torch._inductor.config as icfg

    import memopt
    from memopt import api

    if not args.cpu_thresholds:
        icfg.realize_opcount_threshold, icfg.realize_acc_reads_threshold = 30, 8
    icfg.fx_graph_cache = False
    torch.set_num_threads(1)
    kw = {k: v for k, v in (("budget", args.budget), ("config", args.config)) if v is not None}
    model, inputs = build()
    opt = memopt.optimize(model, **kw)
    for _ in range(args.steps):
        model.zero_grad(set_to_none=True)
        opt(**inputs).loss.backward()
    print(memopt.report(opt).table())
    for i, region in enumerate(api._STATES[opt].regions):
        sec, plan = region.extra.get("inductor") or {}, region.extra.get("planner") or {}
        print(
            f"region {i}: plan {plan.get('plan_strings')}, predicted {plan.get('predicted_peak')}"
        )
        if sec:
            print(f"  Inductor: peak {sec.get('peak')} (forward {sec.get('fwd_peak')}, backward "
                  f"{sec.get('bwd_peak')}), the model's {sec.get('model_peak')}")  # fmt: skip
            print(f"  live at the backward's peak: {sec.get('bwd_at_peak')}")
            print(f"  peak nodes: {list(sec.get('bwd_peak_nodes') or ())[:8]}")


if __name__ == "__main__":
    main()
