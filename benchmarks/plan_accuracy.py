"""Predicted vs measured peak memory of one training step on a GPU.

For a GPT-style and a Llama-style Hugging Face config (bf16, realistic batch and sequence),
the prediction comes from ``memopt plan``'s machinery (fake tensors on the GPU host, no
allocation) and the measurement from a real training step with ``memopt.optimize`` at the
same settings: ``torch.cuda.max_memory_allocated`` over steps 2..N (step 1 creates the AdamW
states) with ``torch.optim.AdamW(fused=True)`` on bf16 parameters, i.e. states in bf16
(``--state-dtype param``), and ``zero_grad(set_to_none=True)``. The saved-activation bytes of
the first forward are measured with saved-tensor hooks.

    python benchmarks/plan_accuracy.py                 # both models, levels 0 and 1
    python benchmarks/plan_accuracy.py --models llama --levels 1 --depth full
    python benchmarks/plan_accuracy.py --emulate   # predict as memopt plan does without a GPU
"""

from __future__ import annotations

import argparse
import gc
import time

import torch

import memopt
from memopt.cli import models
from memopt.cli.analyze import Request, analyze
from memopt.config import resolve_config
from memopt.measure import measure_saved_activation_bytes
from memopt.symbolic import fmt_bytes

CONFIGS = {
    # GPT-2 medium shape (355M parameters), dropout as in the default config
    "gpt": ("hf:gpt2", {"n_embd": 1024, "n_layer": 24, "n_head": 16}, 8, 1024),
    # TinyLlama-1.1B shape (GQA 32/4 heads)
    "llama": (
        "hf:llama",
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
        },
        8,
        2048,
    ),
}


def predict(source, batch: int, seq: int, level: int, depth: str, emulate: bool) -> dict:
    request = Request(
        emulate_cuda=emulate or None,
        batch=batch,
        seq=seq,
        dtype=torch.bfloat16,
        device_kind="cuda",
        depth=depth,
        optimizer="adamw",
        state_dtype="param",
    )
    t0 = time.perf_counter()
    a = analyze(source, request, [resolve_config(level=level)])
    peak = a.peaks[0].at(a.values)
    return {
        "peak": peak.bytes,
        "saved": a.reports[0].saved_bytes()[1],
        "phase": peak.phase_name,
        "table": peak.table(),
        "seconds": time.perf_counter() - t0,
        "depths": a.traced_depths,
        "emulated": a.emulated,
    }


def _train(source, batch: int, seq: int, level: int, steps: int) -> dict:
    torch.manual_seed(0)
    built = source.materialize(batch=batch, seq=seq, dtype=torch.bfloat16, device="cuda")
    model = built.model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    compiled = memopt.optimize(model, level=level)
    exclude = [*model.parameters(), *model.buffers(), *built.args, *built.kwargs.values()]

    def forward() -> torch.Tensor:
        return compiled(*built.args, **built.kwargs).loss

    saved = None
    t0 = time.perf_counter()
    for step in range(steps):
        if step == 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        loss, nbytes = measure_saved_activation_bytes(forward, exclude=exclude)
        saved = nbytes if saved is None else saved
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = None
    torch.cuda.synchronize()
    return {
        "peak": torch.cuda.max_memory_allocated(),
        "saved": saved,
        "seconds": time.perf_counter() - t0,
    }


def measure(source, batch: int, seq: int, level: int, steps: int) -> dict:
    torch._dynamo.reset()
    result = _train(source, batch, seq, level, steps)
    gc.collect()
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt,llama")
    p.add_argument("--levels", default="0,1")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--depth", choices=("auto", "full"), default="auto")
    p.add_argument("--verbose", action="store_true", help="print the predicted breakdown")
    p.add_argument(
        "--emulate",
        action="store_true",
        help="predict as on a laptop: fake CPU tensors with GPU attention kernels",
    )
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("plan_accuracy needs a CUDA device")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, memopt {memopt.__version__}")
    print(
        "| model | batch x seq | level | predicted peak | measured peak | error | "
        "predicted saved | measured saved | plan time |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        spec, overrides, batch, seq = CONFIGS[name]
        source = models.resolve(spec, overrides)
        for level in (int(x) for x in args.levels.split(",")):
            pred = predict(source, batch, seq, level, args.depth, args.emulate)
            meas = measure(source, batch, seq, level, args.steps)
            err = 100.0 * (pred["peak"] - meas["peak"]) / meas["peak"]
            print(
                f"| {name} ({spec}) | {batch} x {seq} | {level} | {fmt_bytes(pred['peak'])} | "
                f"{fmt_bytes(meas['peak'])} | {err:+.1f}% | {fmt_bytes(pred['saved'])} | "
                f"{fmt_bytes(meas['saved'])} | {pred['seconds']:.0f} s |",
                flush=True,
            )
            if args.verbose:
                print(f"traced depths {pred['depths']}, emulated cuda: {pred['emulated']}")
                print(pred["table"], flush=True)


if __name__ == "__main__":
    main()
