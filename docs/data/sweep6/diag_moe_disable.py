"""python diag_moe_disable.py : repro_moe_estimate's count under memopt level 0 with
detect_layers disabled (does memopt's layer tagging change the baseline partition?)."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from benchmarks.zoo import build, one_step
from sweep6_models import NEW

model, inputs = build(NEW["qwen3_moe"], "tiny", "cpu", torch.float32)
for kw in ({"disable_passes": "detect_layers"}, {"disable_passes": "detect_layers,find_saved_activations,find_recompute_subgraphs,cluster_subgraphs,time_kernels,plan_budget,apply_recompute,offload"}):
    torch._dynamo.reset()
    with compat.no_compile_caches():
        try:
            _, _, m = one_step(model, memopt.optimize(model, level=0, **kw), inputs)
            print(kw, "memopt level 0 measured", m.compiled, flush=True)
        except Exception as e:
            print(kw, "error", type(e).__name__, str(e)[:300], flush=True)
