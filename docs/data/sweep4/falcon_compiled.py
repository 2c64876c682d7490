import sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel
from memopt import _torch_compat as compat
from sweep4_models import MODELS
name = sys.argv[1]
kind, build, needs = MODELS[name]
entry = ZooModel(name, kind, build, needs)
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    for kw in ({"level": 0}, {"level": 1}):
        torch._dynamo.reset()
        opt = zoo._compiled(model, **kw)
        _, _, m = zoo.one_step(model, opt, inputs)
        rep = memopt.report(opt)
        print(kw, "fx", rep.saved_bytes(), "compiled", rep.compiled_saved_bytes(), "measured", m.compiled, m.eager)
        print([ (r.extra.get("inductor") or {}).get("saved_delta") for r in rep.regions])
    print(rep.table()[-1500:])
