"""Graph breaks / recompiles and region count of one step under memopt.optimize(**kw).
python run_one.py diag_breaks NAME [offload|level1|compile]"""
import sys, torch, logging
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
torch._logging.set_logs(graph_breaks=True, recompiles=True)
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel, step_loss
from memopt import _torch_compat as compat
from sweep4_models import MODELS

name, how = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "offload")
kw = {"offload": dict(offload_layers=1, offload_min_bytes=0), "level1": dict(level=1)}.get(how)
entry = ZooModel(name, *MODELS[name])
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    torch._dynamo.reset()
    opt = memopt.optimize(model, **kw) if kw else torch.compile(model)
    for i in range(2):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        step_loss(opt(**inputs)).backward()
        if kw:
            rep = memopt.report(opt)
            print(f"step {i}: {how}: regions={len(rep.regions)} runs={[rep.runs(r) for r in rep.regions]} "
                  f"layers={[r.extra.get('layers') for r in rep.regions]}", flush=True)
