"""DBRX (sweep 3 builder) with offload_layers=1 for four steps: the report names the runs and bytes.
Run: PYTHONPATH=<repo>:docs/data/sweep3 python docs/data/diag_s54/dbrx_offload.py"""
import logging, sys, time
import os; sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "docs/data/sweep3")]
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
logging.getLogger("memopt").setLevel(logging.INFO)
import torch, memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel, step_loss
from sweep3_models import MODELS
kind, build, needs = MODELS["dbrx"]
model, inputs = zoo.build(ZooModel("dbrx", kind, build, needs), "tiny", "cpu", torch.float32)
print("layers", [n for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList)], flush=True)
opt = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
t0 = time.time()
for s in range(4):
    model.zero_grad(set_to_none=True)
    step_loss(opt(**inputs)).backward()
    print("step", s, round(time.time() - t0, 1), flush=True)
rep = memopt.report(opt)
print(rep.table())
print("offloaded", rep.offloaded_bytes())
for r in rep.regions:
    print(r.extra.get("layers"), r.extra.get("offload"))
