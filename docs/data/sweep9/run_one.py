"""python run_one.py NAME MODE   (MODE: eager | check | offload | plain)"""
import json
import logging
import os
import sys
import time
import traceback
import warnings

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
sys.path.insert(0, __import__("os").path.abspath(__import__("os").path.join(__import__("os").path.dirname(__file__), "../../..")))
import torch

torch.set_num_threads(1)
name, mode = sys.argv[1], sys.argv[2]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
warnings.simplefilter("always")

import memopt  # noqa: E402
from benchmarks import zoo  # noqa: E402
from benchmarks.zoo_models import step_loss  # noqa: E402
from memopt import _torch_compat as compat  # noqa: E402
from sweep9_models import NEW  # noqa: E402

entry = NEW[name]
t0 = time.time()


def step(model, fn, inputs):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    loss = step_loss(fn(**inputs))
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()
                           if p.grad is not None}


def cmp(g0, g1):
    if g0.keys() != g1.keys():
        return f"grad keys differ: {sorted(set(g0) ^ set(g1))[:5]}"
    worst = 0.0
    bad = []
    for k in g0:
        a, b = g1[k], g0[k]
        if a.numel():
            e = ((a - b).abs() / (b.abs() + 1e-5)).max().item()
            worst = max(worst, e)
            if not torch.allclose(a, b, rtol=1e-3, atol=1e-5):
                bad.append(k)
    return f"max_rel_err={worst:.2e} n_bad={len(bad)} {bad[:3]}"


out = {"model": name, "mode": mode}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        if mode == "eager":
            model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
            l, g = step(model, model, inputs)
            out.update(cls=type(model).__name__, loss=l.item(), n_grads=len(g),
                       n_params=sum(p.numel() for p in model.parameters()))
        elif mode == "check":
            with compat.no_compile_caches():
                out.update(zoo.check_model(entry))
        elif mode in ("offload", "plain", "offload0"):
            model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
            l_e, g_e = step(model, model, inputs)
            torch._dynamo.reset()
            if mode == "offload":
                opt = memopt.optimize(model, offload_layers=1)
            elif mode == "offload0":
                opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
            else:
                opt = torch.compile(model)
            with compat.no_compile_caches():
                l1, g1 = step(model, opt, inputs)
                l2, g2 = step(model, opt, inputs)
            out.update(cls=type(model).__name__, loss_eager=l_e.item(), loss1=l1.item(),
                       loss2=l2.item(), step1_vs_eager=cmp(g_e, g1), step2_vs_eager=cmp(g_e, g2))
            if mode in ("offload", "offload0"):
                try:
                    rep = memopt.report(opt)
                    out["regions"] = len(rep.regions)
                    out["report_saved"] = rep.saved_bytes()
                    out["offload_notes"] = [
                        str(r.extra.get("offload", ""))[:300] for r in rep.regions
                    ]
                    txt = str(rep)
                    out["report_head"] = txt[:1500]
                except Exception as e:
                    out["report_error"] = f"{type(e).__name__}: {e}"[:500]
        out["ok"] = True
    except Exception as e:
        out["ok"] = False
        out["error"] = f"{type(e).__name__}: {e}"[:1000]
        tb = traceback.format_exc().splitlines()
        out["traceback_tail"] = tb[-40:]
        traceback.print_exc()
ws = []
for w in caught:
    s = f"{w.category.__name__}: {w.message}"
    if s not in ws:
        ws.append(s)
out["warnings"] = [w[:600] for w in ws if "memopt" in w.lower() or "offload" in w.lower()
                   or "UserWarning" in w][:15]
out["seconds"] = round(time.time() - t0, 1)
print("RESULT " + json.dumps(out, default=str), flush=True)
