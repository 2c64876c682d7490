"""DBRX estimate miss: per-run predicted baseline bytes vs measured saved tensors (level 1, as check_model).
python diag_dbrx.py [name]"""
import sys, collections, torch
sys.path[:0] = ["/work/main", "/tmp/sweep3"]
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel
from memopt import _torch_compat as compat
from sweep3_models import MODELS
name = sys.argv[1] if len(sys.argv) > 1 else "dbrx"
kind, build, needs = MODELS[name]
entry = ZooModel(name, kind, build, needs)
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    opt = zoo._compiled(model, level=1)
    l, g, saved = zoo.one_step(model, opt, inputs)
    rep = memopt.report(opt)
    print("predicted", rep.saved_bytes(), "measured compiled", saved.compiled, "eager", saved.eager)
    s = rep.step
    print("step:", None if s is None else dict(forward_known=s.forward_known, sequence=s.sequence, run_sizes=s.run_sizes))
    for r in rep.regions:
        print(f"region {r.index}: runs={rep.runs(r)} baseline={r.baseline_saved_bytes} symbolic={r.baseline_saved_symbolic} symbols={r.symbols} saved_inputs={r.extra.get('saved_inputs')}")
    for rr, keys in rep.step_runs():
        print("  run region", rr.index, "baseline", rr.baseline_saved_bytes, "symbols", rr.symbols)
    c = collections.Counter((t.shape, str(t.dtype), t.nbytes, t.compiled) for t in saved.tensors)
    for k, v in sorted(c.items(), key=lambda kv: -kv[0][2] * kv[1]):
        print("  saved", k, "x", v)
