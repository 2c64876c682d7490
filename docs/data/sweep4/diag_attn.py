"""ControlNet: recompute only the first N attention ops (config=["Attention+:1:N"]) -> loss and
gradients vs torch.compile (NaN count).  python run_one.py diag_attn [NAME]"""
import sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel
from memopt import _torch_compat as compat
from sweep4_models import MODELS

name = sys.argv[1] if len(sys.argv) > 1 else "controlnet"
entry = ZooModel(name, *MODELS[name])
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    l0, g0, _ = zoo.one_step(model, zoo._compiled(model), inputs)
    for n in (1, 2, 3, 4):
        opt = zoo._compiled(model, config=[f"Attention+:1:{n}"])
        l1, g1, saved = zoo.one_step(model, opt, inputs)
        nan = sorted(k for k, g in g1.items() if not torch.isfinite(g).all())
        bad = sorted(k for k in g0 if not torch.allclose(g1[k], g0[k], rtol=1e-4, atol=1e-5))
        rep = memopt.report(opt)
        cl = [(c["cluster_id"], c["strategy"], c["count"], c["enabled"]) for c in rep.clusters() if c["cluster_id"].startswith("Attention")]
        print(f"Attention+:1:{n}: loss {l1.item()!r} vs compile {l0.item()!r}; non-finite grads {len(nan)} "
              f"(e.g. {nan[:3]}); wrong grads {len(bad)}/{len(g0)} (e.g. {bad[:4]}); clusters {cl}", flush=True)
