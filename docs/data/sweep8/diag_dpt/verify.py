"""python verify.py : the dpt miss is check_model measuring a different dynamo partition than
memopt's report predicts. transformers' output capturing (DPT's backbone asks for hidden
states) installs forward hooks on the model's FIRST forward, under a threading.Lock: a graph
break (`Unsupported context manager`), so that first compiled step runs 2 graphs (backbone |
neck+head+loss); every later compile of the same model object (hooks installed) gets 1 graph.
check_model measures plain torch.compile on that first step and predicts from memopt's later
single-graph compile.
Here, order swapped: (1) memopt level=1 on the fresh model (2 regions) -> its level-0 prediction;
(2) plain torch.compile after the hooks are installed (1 graph) -> measured."""
import os, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from sweep8_models import NEW
from benchmarks import zoo
from torch._dynamo.utils import counters
t0 = time.time()
model, inputs = zoo.build(NEW["dpt"], "tiny", "cpu", torch.float32)
print("hooks installed before any step:", getattr(model, "_output_capturing_hooks_installed", None),
      getattr(model.dpt, "_output_capturing_hooks_installed", None))
counters.clear()
with compat.no_compile_caches():
    opt = zoo._compiled(model, level=1)
    _, _, l1 = zoo.one_step(model, opt, inputs)
rep = memopt.report(opt)
print(f"(1) fresh model, memopt level=1: graphs={counters['stats']['unique_graphs']} "
      f"regions={len(rep.regions)} predicted(level0, level1)={rep.saved_bytes()} "
      f"measured level1={l1.compiled}  ({time.time()-t0:.0f}s)", flush=True)
counters.clear()
with compat.no_compile_caches():
    _, _, base = zoo.one_step(model, zoo._compiled(model), inputs)
print(f"(2) hooks installed, plain torch.compile: graphs={counters['stats']['unique_graphs']} "
      f"measured={base.compiled} eager={base.eager}  ({time.time()-t0:.0f}s)", flush=True)
