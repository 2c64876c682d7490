"""python diag_scale.py NAME : torch.compile's saved bytes (saved-tensor hooks) at batch 2 and 4,
beside `memopt plan`'s activation formula."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
from memopt import _torch_compat as compat
from benchmarks.zoo import build, one_step
from sweep6_models import NEW
name = sys.argv[1]
for b in (2, 4):
    model, inputs = build(NEW[name], "tiny", "cpu", torch.float32, batch=b)
    torch._dynamo.reset()
    with compat.no_compile_caches():
        _, _, m = one_step(model, torch.compile(model), inputs)
    print(f"{name} batch {b}: torch.compile saved {m.compiled} B, eager-saved {m.eager} B", flush=True)
