"""ControlNet budget=0.5 gradients vs torch.compile / eager / float64, per parameter; then each
plan string of the budget's plan alone (config=[plan]) to find the one that moves gradients.
python run_one.py diag_controlnet [NAME]"""
import copy, json, sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel
from memopt import _torch_compat as compat
from sweep4_models import MODELS

name = sys.argv[1] if len(sys.argv) > 1 else "controlnet"
entry = ZooModel(name, *MODELS[name])
f32 = torch.float32


def table(tag, g, g0, ge, gt):
    scale = max(t.abs().max().item() for t in gt.values())
    rows = []
    for k in g0:
        d = (g[k] - g0[k]).abs().max().item()
        spread = (ge[k] - g0[k]).abs().max().item()
        tru = (g[k].double() - gt[k]).abs().max().item()
        tru0 = (g0[k].double() - gt[k]).abs().max().item()
        rows.append((d / (spread + 1e-12), k, d, spread, tru / scale, tru0 / scale, g0[k].abs().max().item()))
    rows.sort(reverse=True)
    print(f"--- {tag}: worst params (|memopt-compile| / |eager-compile|), err vs f64 truth / max|grad| (memopt, compile)")
    for r in rows[:8]:
        print(f"  {r[1]}: |d|={r[2]:.3e} spread={r[3]:.3e} ratio={r[0]:.1f} truth_err={r[4]:.3e} compile_truth_err={r[5]:.3e} absmax={r[6]:.3e}")
    worst = max(r[4] for r in rows)
    print(f"  worst truth err {worst:.3e} vs compile's {max(r[5] for r in rows):.3e}", flush=True)


with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", f32)
    l0, g0, _ = zoo.one_step(model, zoo._compiled(model), inputs)
    le, ge, _ = zoo.one_step(model, model, inputs)
    ref = copy.deepcopy(model).double()
    wide = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}
    _, gt, _ = zoo.one_step(ref, ref, wide)
    budget = zoo._compiled(model, budget=0.5)
    lb, gb, _ = zoo.one_step(model, budget, inputs)
    rep = memopt.report(budget)
    plans = rep.frozen_plan()["config"]
    print("loss compile/eager/budget", l0.item(), le.item(), lb.item())
    print("agree:", zoo._agree(l0, g0, lb, gb, f32), "within spread:", zoo._within_spread(g0, [ge], gb),
          "within truth:", zoo._within_truth(gt, [g0, ge], gb))
    table("budget 0.5", gb, g0, ge, gt)
    print("plans:", json.dumps(plans))
    for p in plans:
        opt = zoo._compiled(model, config=[p])
        lp, gp, _ = zoo.one_step(model, opt, inputs)
        ok = zoo._agree(l0, g0, lp, gp, f32)
        print(f"plan {p!r}: agree={ok} spread={zoo._within_spread(g0, [ge], gp)} "
              f"truth={zoo._within_truth(gt, [g0, ge], gp)}", flush=True)
        if not ok[0]:
            table(p, gp, g0, ge, gt)
