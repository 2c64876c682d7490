"""Largest batch that trains under a GPU memory cap: memopt vs torch.compile, and tokens/s there.

Under ``torch.cuda.set_per_process_memory_fraction(cap / total)``, for each variant, the largest
batch in [1, --max-batch] that runs --steps training steps (bf16 Hugging Face model, AdamW
fused on the bf16 parameters, ``zero_grad(set_to_none=True)``) without
``torch.OutOfMemoryError``; at that batch, the median step time (steps 2..N), tokens/s
(batch x seq / step time) and ``max_memory_allocated`` (steps 2..N).

Variants: ``compile`` (torch.compile), ``memopt-level1`` (``memopt.optimize(level=1)``),
``memopt-budget`` (``memopt.optimize(budget=B)``) and ``torch-budget-0.1``
(``torch._functorch.config.activation_memory_budget = 0.1``; also ``torch-budget-F``,
``memopt-levelN``). ``B`` = cap - --margin-gib - the AdamW states: the planner's predicted peak
already counts the parameters (graph inputs), the gradients (backward outputs) and the
activations, but not the optimizer states, which are allocated before the step.

Search: each trial is one static-shape compile (``dynamic=False``, ``torch._dynamo.reset()``
between trials) and --steps steps; OOM is caught and everything is freed before the next trial.
Without a hint: doubling from 1, then bisection. With --start (one batch for every variant, or
``variant=batch,...``): the hint, then hint+1, +2, +4 ... (or -1, -2, -4 ... if the hint fails),
then bisection. On CUDA, after the first trial that fits, the next probe is the batch that the
measured peak extrapolates to (linear in batch) unless --no-guess. Every trial is printed and
saved to --out as it comes; --resume reuses the trials stored there (same settings).

    # on the GPU (H100): Llama 8 layers, hidden 2048, seq 2048, 16 GiB cap; two runs of ~6 min
    python benchmarks/largest_batch.py --start 4 --variants compile,memopt-level1 \\
        --out largest_batch.json
    python benchmarks/largest_batch.py --start 4 --variants memopt-budget,torch-budget-0.1 \\
        --resume --out largest_batch.json
    python benchmarks/largest_batch.py --table largest_batch.json     # the table again
    # CPU (or GPU) check of the search and bookkeeping: tiny model, OOM simulated per variant
    python benchmarks/largest_batch.py --smoke --out /tmp/largest_batch_smoke.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(__file__))

VARIANTS = ("compile", "memopt-level1", "memopt-budget", "torch-budget-0.1")
DEFAULTS = {"llama": (8, 2048), "gpt2": (12, 768)}  # layers, hidden
SMOKE_LIMITS = {"compile": 1, "memopt-level1": 2, "memopt-budget": 3, "torch-budget-0.1": 1}
TARGET_BATCH, TARGET_TPS = 2.0, 0.9  # memopt's largest batch >= 2x, at >= 90% of tokens/s
GIB = 2**30


# --- the search -----------------------------------------------------------------------------
def _fits(result) -> bool:
    return bool(result) if isinstance(result, bool) else bool(result["ok"])


def largest_batch(
    trial: Callable[[int], object],
    max_batch: int,
    start: int | None = None,
    guess: Callable[[int, object], int | None] | None = None,
) -> tuple[int, list[tuple[int, bool]]]:
    """The largest batch in [1, max_batch] for which ``trial(batch)`` fits (0 if none), and the
    trials run, in order, as (batch, fits). ``trial`` returns a bool or a dict with ``"ok"``.

    Assumes fitting is monotone in the batch. Without ``start``: 1, 2, 4, ... until a batch
    fails (or max_batch fits), then bisection. With ``start``: the hint, then hint+1, +2, +4,
    ... while they fit (hint-1, -2, -4, ... while they fail), then bisection. ``guess(batch,
    result)``, called once after the first trial that fits, may name a better hint: the search
    goes on from there as from ``start``.
    """
    good, bad = 0, max_batch + 1  # largest batch known to fit, smallest known to fail
    anchor = None if start is None else min(max(int(start), 1), max_batch)
    b, inc, up, bisect = anchor or 1, 1, True, False
    guessed = guess is None
    trials: list[tuple[int, bool]] = []
    while True:
        result = trial(b)
        ok = _fits(result)
        trials.append((b, ok))
        if ok:
            good = max(good, b)
        else:
            bad = min(bad, b)
        if bad - good <= 1:
            return good, trials
        if ok and not guessed:
            guessed = True
            g = guess(b, result)
            if g is not None:
                anchor, inc, up, bisect = min(max(int(g), good), bad - 1), 1, True, False
                if anchor > good:
                    b = anchor
                    continue
        if not bisect and anchor is not None:
            if b == anchor:
                up = ok
            if up and ok and anchor + inc < bad:
                b, inc = min(anchor + inc, max_batch), 2 * inc
                continue
            if not up and not ok and anchor - inc > good:
                b, inc = max(anchor - inc, 1), 2 * inc
                continue
            bisect = True
        if not bisect and ok and bad > max_batch:  # doubling
            b = min(2 * b, max_batch)
            continue
        bisect = True
        b = (good + bad) // 2


# --- one trial --------------------------------------------------------------------------------
class VariantError(RuntimeError):
    """A trial failed with something other than an out-of-memory error."""


def is_oom(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is an out-of-memory error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


class Trainer:
    """The model, and one trial: compile a variant at one batch, train --steps steps."""

    def __init__(self, args: argparse.Namespace):
        from common import hf_model

        self.args = args
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.cuda = self.device == "cuda"
        torch.manual_seed(0)
        with torch.device(self.device):  # initialize on the device: faster than on the host
            self.model = hf_model(args.model, args.layers, args.hidden, device=self.device)
        if getattr(self.model, "loss_type", "") is None:
            self.model.loss_type = "ForCausalLM"  # avoids a graph break in transformers
        self.vocab = self.model.config.vocab_size
        params = list(self.model.parameters())
        self.param_bytes = sum(p.numel() * p.element_size() for p in params)
        # AdamW states (exp_avg, exp_avg_sq in the parameter dtype; fused: a float32 step)
        self.state_bytes = 2 * self.param_bytes + 4 * len(params) * self.cuda
        self.cap = int(args.cap_gib * GIB)
        self.budget = max(int(self.cap - args.margin_gib * GIB - self.state_bytes), 1 << 20)
        self.base = torch.cuda.memory_allocated() if self.cuda else 0

    def compile(self, variant: str):
        import memopt

        if variant == "compile":
            return torch.compile(self.model, dynamic=False)
        if variant.startswith("torch-budget-"):
            budget = float(variant.removeprefix("torch-budget-"))
            torch._functorch.config.activation_memory_budget = budget
            return torch.compile(self.model, dynamic=False)
        if variant.startswith("memopt-level"):
            level = int(variant.removeprefix("memopt-level"))
            return memopt.optimize(self.model, level=level, dynamic=False)
        if variant == "memopt-budget":
            return memopt.optimize(self.model, budget=self.budget, dynamic=False)
        raise ValueError(f"unknown variant {variant!r}")

    def _steps(self, variant: str, batch: int) -> dict:
        import memopt

        args = self.args
        ids = torch.randint(0, self.vocab, (batch, args.seq), device=self.device)
        if args.smoke and batch > args.smoke_limits.get(variant, 0):  # before compiling: quick
            raise torch.OutOfMemoryError(f"simulated: batch {batch} > --smoke-limit")
        compiled = self.compile(variant)
        opt = torch.optim.AdamW(self.model.parameters(), lr=1e-5, fused=self.cuda)
        times, before = [], 0
        for i in range(args.steps):
            if i == 1 and self.cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            loss = compiled(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss = None
            if self.cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        step_s = statistics.median(times[1:])
        out = {
            "ms": 1e3 * step_s,
            "tokens_per_s": batch * args.seq / step_s,
            "first_step_s": times[0],
            "peak": torch.cuda.max_memory_allocated() if self.cuda else None,
            "reserved": torch.cuda.max_memory_reserved() if self.cuda else None,
            "before_step": before if self.cuda else None,
        }
        if variant.startswith("memopt"):
            regions = memopt.report(compiled).regions
            out["regions"] = len(regions)
            planner = [r.extra["planner"] for r in regions if "planner" in r.extra]
            if planner:
                out["predicted_peak"] = [p["predicted_peak"] for p in planner]
                out["feasible"] = [p["feasible"] for p in planner]
        return out

    def trial(self, variant: str, batch: int) -> dict:
        t0 = time.perf_counter()
        outcome: dict = {"batch": batch, "ok": False}
        error = None
        try:
            outcome.update(self._steps(variant, batch))
            outcome["ok"] = True
        except Exception as e:
            if not is_oom(e):
                error = _one_line(e)
            outcome["error"] = _one_line(e)
        finally:
            torch._functorch.config.activation_memory_budget = 1.0
        self.free()
        outcome["trial_s"] = time.perf_counter() - t0
        if self.cuda:
            outcome["leaked"] = torch.cuda.memory_allocated() - self.base
        if error is not None:
            outcome["fatal"] = True
            raise VariantError(error, outcome)
        return outcome

    def free(self) -> None:
        for p in self.model.parameters():
            p.grad = None
        gc.collect()
        torch._dynamo.reset()
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def guess(self, batch: int, result: dict) -> int | None:
        """The batch the reserved peak of a fitting trial extrapolates to (linear in batch)."""
        if not result.get("reserved") or result.get("before_step") is None:
            return None
        fixed = result["before_step"] + self.param_bytes  # params + states + ids, and grads
        per_sample = (result["reserved"] - fixed) / batch
        if per_sample <= 0:
            return None
        return int((self.cap - fixed) // per_sample)


# --- bookkeeping --------------------------------------------------------------------------------
def parse_per_variant(text: str | None, variants, kind=int) -> dict:
    """``"8"`` (every variant) or ``"compile=8,memopt-level1=16"``."""
    if not text:
        return {}
    if "=" not in text:
        return {v: kind(text) for v in variants}
    out = {}
    for item in text.split(","):
        k, v = item.split("=")
        out[k.strip()] = kind(v)
    return out


def settings(args: argparse.Namespace) -> dict:
    keys = ("model", "layers", "hidden", "seq", "cap_gib", "margin_gib", "steps", "smoke")
    out = {k: getattr(args, k) for k in keys}
    if args.smoke:
        out["smoke_limits"] = args.smoke_limits
    return out


def load(path: str | None) -> dict | None:
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def save(path: str | None, data: dict) -> None:
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def run_all(
    args: argparse.Namespace,
    trial: Callable[[str, int], dict],
    meta: dict,
    guess: Callable[[int, dict], int | None] | None = None,
    previous: dict | None = None,
) -> dict:
    """Search each of ``args.variants`` with ``trial(variant, batch)``, saving to ``args.out``
    after every trial; ``previous`` (a saved run with the same settings) supplies cached trials.
    """
    data = {"settings": settings(args), "meta": meta, "variants": {}}
    old_variants = {}
    if previous is not None:
        if previous.get("settings") == data["settings"]:
            old_variants = previous.get("variants", {})
            data["variants"] = dict(old_variants)
        else:
            print("--resume: the saved run has other settings; starting afresh", flush=True)
    starts = args.starts
    for variant in args.variants:
        cached = {
            t["batch"]: t
            for t in old_variants.get(variant, {}).get("trials", [])
            if "fatal" not in t
        }
        entry = {"start": starts.get(variant), "trials": [], "status": "running"}
        data["variants"][variant] = entry

        def run(batch: int, variant=variant, entry=entry, cached=cached) -> dict:
            if batch in cached:
                t = cached[batch]
                src = "cached"
            else:
                try:
                    t = trial(variant, batch)
                except VariantError as e:
                    entry["trials"].append(e.args[1])
                    raise
                src = "ran"
            entry["trials"].append(t)
            save(args.out, data)
            row = {"variant": variant, **{k: t.get(k) for k in ("batch", "ok")}}
            for k in ("tokens_per_s", "ms", "first_step_s", "trial_s"):
                if t.get(k) is not None:
                    row[k] = round(t[k], 2)
            if t.get("peak") is not None:
                row["peak_gib"] = round(t["peak"] / GIB, 3)
            if (t.get("leaked") or 0) > 2**27:  # not freed after the trial: biases the next ones
                row["leaked_gib"] = round(t["leaked"] / GIB, 3)
            if not t["ok"]:
                row["error"] = t.get("error", "")[:120]
            print(json.dumps({**row, "trial": src}), flush=True)
            return t

        try:
            best, _ = largest_batch(run, args.max_batch, start=starts.get(variant), guess=guess)
        except VariantError as e:
            entry["status"] = f"error: {e.args[0]}"
            save(args.out, data)
            print(f"{variant}: {entry['status']}", flush=True)
            continue
        entry["largest"] = best
        entry["status"] = "done"
        fits = [t for t in entry["trials"] if t["ok"] and t["batch"] == best]
        entry["at_largest"] = fits[-1] if fits else None
        save(args.out, data)
    return data


def table(data: dict) -> str:
    s, meta, variants = data["settings"], data["meta"], data["variants"]
    out = [
        f"{s['model']} {s['layers']} layers, hidden {s['hidden']}, seq {s['seq']}, cap "
        f"{s['cap_gib']} GiB ({meta.get('device')}, torch {meta.get('torch')}, memopt "
        f"{meta.get('memopt')}){' [SMOKE: simulated OOM]' if s.get('smoke') else ''}",
        "",
        "| variant | largest batch | tokens/s | vs compile's tokens/s | peak GiB | trials |",
        "|---|---|---|---|---|---|",
    ]
    base = variants.get("compile", {}).get("at_largest") or {}
    base_tps = base.get("tokens_per_s")
    for name, v in variants.items():
        best = v.get("at_largest") or {}
        tps = best.get("tokens_per_s")
        largest = v.get("largest")
        shown = "—" if largest is None else str(largest)
        if largest is not None and largest >= meta.get("max_batch", 1 << 30):
            shown += " (= --max-batch)"
        vs = f"{100 * tps / base_tps:.1f}%" if tps and base_tps else "—"
        peak = f"{best['peak'] / GIB:.2f}" if best.get("peak") is not None else "—"
        if v.get("status", "").startswith("error"):
            shown = v["status"][:80]
        out.append(
            f"| {name} | {shown} | {f'{tps:,.0f}' if tps else '—'} | {vs} | {peak} | "
            f"{len(v.get('trials', []))} |"
        )
    out += ["", target_lines(data)]
    return "\n".join(out)


def target_lines(data: dict) -> str:
    variants = data["variants"]
    comp = variants.get("compile", {})
    cb, cbest = comp.get("largest"), comp.get("at_largest") or {}
    lines = [
        f"Target: memopt's largest batch >= {TARGET_BATCH:g}x compile's, at >= "
        f"{100 * TARGET_TPS:.0f}% of compile's tokens/s (each at its own largest batch)."
    ]
    if not cb or not cbest.get("tokens_per_s"):
        return "\n".join(lines + ["- compile has no result: cannot compare."])
    for name, v in variants.items():
        if not name.startswith("memopt"):
            continue
        b, best = v.get("largest"), v.get("at_largest") or {}
        if not b or not best.get("tokens_per_s"):
            lines.append(f"- {name}: no result ({v.get('status')}).")
            continue
        rb, rt = b / cb, best["tokens_per_s"] / cbest["tokens_per_s"]
        ok_b, ok_t = rb >= TARGET_BATCH, rt >= TARGET_TPS
        lines.append(
            f"- {name}: batch {b} = {rb:.2f}x compile's {cb} ({'met' if ok_b else 'missed'}); "
            f"tokens/s {100 * rt:.1f}% of compile's ({'met' if ok_t else 'missed'}) -> "
            f"target {'MET' if ok_b and ok_t else 'MISSED'}."
        )
        # the same question at exactly the target batch: is 2x the batch worth 90% of the speed?
        at = math.ceil(TARGET_BATCH * cb)
        hit = [t for t in v.get("trials", []) if t.get("ok") and t.get("batch") == at]
        if at != b and hit and hit[-1].get("tokens_per_s"):
            rt2 = hit[-1]["tokens_per_s"] / cbest["tokens_per_s"]
            lines.append(
                f"  at batch {at} ({TARGET_BATCH:g}x compile's): tokens/s {100 * rt2:.1f}% of "
                f"compile's -> {'met' if rt2 >= TARGET_TPS else 'missed'}."
            )
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(DEFAULTS), default="llama")
    p.add_argument("--layers", type=int, help="default: llama 8, gpt2 12")
    p.add_argument("--hidden", type=int, help="default: llama 2048, gpt2 768")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--cap-gib", type=float, default=16.0)
    p.add_argument("--margin-gib", type=float, default=0.5, help="memopt-budget: cap - margin")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=6, help="steps per trial (timing: 2..N)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--start", help="hint: a batch, or variant=batch,... (default: none)")
    p.add_argument("--no-guess", action="store_true", help="no extrapolation from a peak")
    p.add_argument("--out", help="JSON results, written after every trial")
    p.add_argument("--resume", action="store_true", help="reuse the trials saved in --out")
    p.add_argument("--table", help="print the table of a saved run and exit")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny model (2 layers, hidden 64 (gpt2) / 128 (llama), seq 32, max batch 8, 3 "
        "steps); OOM simulated (before compiling) above --smoke-limit; no memory cap",
    )
    p.add_argument("--smoke-limit", help=f"variant=batch,... (default: {SMOKE_LIMITS})")
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.smoke:
        args.layers = args.layers or 2
        args.hidden = args.hidden or (128 if args.model == "llama" else 64)
        args.seq, args.max_batch, args.steps = 32, min(args.max_batch, 8), min(args.steps, 3)
        args.smoke_limits = {**SMOKE_LIMITS, **parse_per_variant(args.smoke_limit, VARIANTS)}
    else:
        args.smoke_limits = {}
    layers, hidden = DEFAULTS[args.model]
    args.layers, args.hidden = args.layers or layers, args.hidden or hidden
    args.starts = parse_per_variant(args.start, args.variants)
    args.steps = max(args.steps, 2)  # step 1 compiles: timing and peak come from steps 2..N
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.table:
        print(table(load(args.table)))
        return
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("largest_batch needs a CUDA device (or --smoke)")

    import memopt

    cuda = torch.cuda.is_available()
    if cuda and not args.smoke:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gib * GIB / total))
    if cuda and any(v == "memopt-budget" for v in args.variants):
        from memopt.passes.plan_budget import device_rates

        device_rates(torch.device("cuda"))  # one-time calibration, outside the trials
        torch.cuda.empty_cache()
    trainer = Trainer(args)
    meta = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "memopt": memopt.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "param_bytes": trainer.param_bytes,
        "optimizer_state_bytes": trainer.state_bytes,
        "memopt_budget_bytes": trainer.budget,
        "max_batch": args.max_batch,
    }
    print(
        f"{args.model} {args.layers}L h{args.hidden} seq {args.seq}: params "
        f"{trainer.param_bytes / GIB:.2f} GiB, AdamW states {trainer.state_bytes / GIB:.2f} GiB, "
        f"cap {args.cap_gib} GiB, memopt budget {trainer.budget / GIB:.2f} GiB",
        flush=True,
    )
    previous = load(args.out) if args.resume else None
    guess = None if (args.no_guess or args.smoke or not cuda) else trainer.guess
    data = run_all(args, trainer.trial, meta, guess=guess, previous=previous)
    save(args.out, data)
    print()
    print(table(data))


if __name__ == "__main__":
    main()
