"""python breaks.py : graph breaks / recompiles of plain torch.compile vs memopt.optimize(level=1)
on dpt (run with TORCH_LOGS=graph_breaks,recompiles). Prints per compiled frame the code name."""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from sweep8_models import NEW
from benchmarks import zoo
from torch._dynamo.utils import counters
model, inputs = zoo.build(NEW["dpt"], "tiny", "cpu", torch.float32)
for name, kw in (("plain", {}), ("memopt_level1", {"level": 1})):
    print("=====", name, flush=True)
    counters.clear()
    with compat.no_compile_caches():
        zoo.one_step(model, zoo._compiled(model, **kw), inputs)
    for k, v in counters["graph_break"].items():
        print("break:", str(k)[:400], v)
    print("stats:", dict(counters["stats"]), flush=True)
