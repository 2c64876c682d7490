"""python plain_graphs.py : plain torch.compile's step with TORCH_LOGS=aot_graphs,output_code
(run with that env var) and the measured saved tensors, in the order saved."""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch
torch.set_num_threads(1)
from memopt import _torch_compat as compat
from sweep8_models import NEW
from benchmarks import zoo
model, inputs = zoo.build(NEW["dpt"], "tiny", "cpu", torch.float32)
with compat.no_compile_caches():
    _, _, base = zoo.one_step(model, zoo._compiled(model), inputs)
for i, t in enumerate(base.tensors):
    print("SAVED", i, t.shape, t.dtype, t.nbytes, t.stride, t.compiled)
print("TOTAL", base.compiled)
