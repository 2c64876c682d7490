"""Sweep 4: benchmarks.zoo.check_model + one offload_layers=1 step vs torch.compile.

python run_one.py NAME [--offload-only] [--check-only]
"""
import json, sys, time, traceback

import torch

sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel, step_loss
from memopt import _torch_compat as compat
from sweep4_models import MODELS


def step(model, fn, inputs):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    loss = step_loss(fn(**inputs))
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def offload_check(entry):
    t0 = time.perf_counter()
    out = {}
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    torch._dynamo.reset()
    l0, g0 = step(model, torch.compile(model), inputs)
    le, ge = step(model, model, inputs)  # eager, for the spread
    model2, inputs2 = zoo.build(entry, "tiny", "cpu", torch.float32)  # fresh copy, same seed
    torch._dynamo.reset()
    opt = memopt.optimize(model2, offload_layers=1, offload_min_bytes=0)
    try:
        l1, g1 = step(model2, opt, inputs2)
    except Exception as e:
        traceback.print_exc()
        out["offload_error"] = f"{type(e).__name__}: {e}"[:400]
        out["offload_seconds"] = round(time.perf_counter() - t0, 1)
        return out
    rep = memopt.report(opt)
    out["offload_regions"] = len(rep.regions)
    out["offloaded_bytes"] = rep.offloaded_bytes()
    out["offload_loss"] = [l0.item(), l1.item()]
    try:
        torch.testing.assert_close(l1, l0)
        out["offload_loss_match"] = True
    except AssertionError:
        out["offload_loss_match"] = False
    bad = {}
    if g1.keys() != g0.keys():
        out["offload_grad_keys_differ"] = sorted(set(g0) ^ set(g1))
    for k in g0:
        if k not in g1:
            continue
        try:
            torch.testing.assert_close(g1[k], g0[k])
        except AssertionError:
            d = (g1[k] - g0[k]).abs()
            rel = (d / g0[k].abs().clamp_min(1e-12)).max().item()
            spread = (ge[k] - g0[k]).abs().max().item()
            bad[k] = {"max_rel": rel, "max_abs": d.max().item(), "eager_vs_compile_abs": spread,
                      "grad_absmax": g0[k].abs().max().item()}
    out["offload_grads_match"] = not bad and g1.keys() == g0.keys()
    out["offload_mismatch"] = bad
    # eager vs compile, for reference
    worst = 0.0
    for k in g0:
        if k in ge:
            worst = max(worst, ((ge[k] - g0[k]).abs() / (g0[k].abs() + 1e-5)).max().item())
    out["eager_vs_compile_max_rel"] = worst
    out["offload_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main():
    name = sys.argv[1]
    if name.startswith("diag_"):  # a diagnostic script of this folder, queued like a model
        import runpy
        sys.argv = [name + ".py", *sys.argv[2:]]
        runpy.run_path(f"/tmp/sweep4/{name}.py", run_name="__main__")
        return
    if name.endswith("@off"):  # NAME@off: the offload step only
        name = name[:-4]
        sys.argv.append("--offload-only")
    kind, build, needs = MODELS[name]
    entry = ZooModel(name, kind, build, needs)
    row = {"model": name}
    if "--offload-only" not in sys.argv:
        try:
            with compat.no_compile_caches():
                row.update(zoo.check_model(entry))
        except Exception as e:
            traceback.print_exc()
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        print(json.dumps(row), flush=True)
    if "--check-only" not in sys.argv:
        try:
            with compat.no_compile_caches():
                row.update(offload_check(entry))
        except Exception as e:
            traceback.print_exc()
            row["offload_error"] = f"{type(e).__name__}: {e}"[:400]
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
