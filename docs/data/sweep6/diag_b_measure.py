"""python diag_b_measure.py NAME BATCH : torch.compile's saved-for-backward bytes of one step of
sweep6_models' NAME at BATCH (benchmarks/zoo.py's measurement, as check_model's "measured"),
to set against `memopt plan sweep6_models:NAME --batch BATCH`'s saved formula."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))
import torch
torch.set_num_threads(1)
from benchmarks import zoo
from memopt import _torch_compat as compat
from sweep6_models import NEW

name, batch = sys.argv[1], int(sys.argv[2])
model, inputs = zoo.build(NEW[name], "tiny", "cpu", torch.float32, batch=batch)
with compat.no_compile_caches():
    torch._dynamo.reset()
    _, _, base = zoo.one_step(model, torch.compile(model), inputs)
print(f"{name} batch {batch}: torch.compile saved {base.compiled:,} B")
