import logging, sys, time
import os; sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "docs/data/sweep3")]
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
logging.getLogger("memopt").setLevel(logging.INFO)
import torch, memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel, step_loss
from memopt.measure import measure_saved
from sweep3_models import MODELS
kind, build, needs = MODELS["dbrx"]
model, inputs = zoo.build(ZooModel("dbrx", kind, build, needs), "tiny", "cpu", torch.float32)
opt = memopt.optimize(model, budget=0.5)
for s in range(3):
    model.zero_grad(set_to_none=True)
    out, m = measure_saved(lambda: step_loss(opt(**inputs)), exclude=[*model.parameters(), *[v for v in inputs.values() if torch.is_tensor(v)]])
    out.backward()
    print("step", s, "measured total", m.total, "compiled", m.compiled, "eager", m.eager, flush=True)
rep = memopt.report(opt)
print(rep.table())
print("saved_bytes", rep.saved_bytes())
