"""Qwen3-MoE (output_router_logits=True): `check_model` calls the level-0 estimate not exact:
predicted 1,282,628 B, torch.compile measured 1,286,724 B (4,096 B = two (128, 4) fp32
tensors). memopt's own level-0 run saves exactly the estimate (1,282,628 B); plain
torch.compile saves the router's softmax(router_logits) twice per MoE layer (two storages with
equal values), memopt's graph once. This script lists, for both, the (tokens, experts) float
tensors saved for backward and what they equal.

    python repro_moe_estimate.py      (from docs/data/sweep6, venv on; ~1 min)
"""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from benchmarks.zoo import build
from benchmarks.zoo_models import step_loss
from sweep6_models import NEW

model, inputs = build(NEW["qwen3_moe"], "tiny", "cpu", torch.float32)
E = model.config.num_experts


def count(fn, label):
    saved = {}

    def pack(t):
        if t.dim() == 2 and t.shape[-1] == E and t.is_floating_point():
            saved.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    with compat.no_compile_caches(), torch.autograd.graph.saved_tensors_hooks(
        torch.compiler.disable(pack), torch.compiler.disable(lambda t: t)
    ):
        torch.manual_seed(0)
        out = fn(**inputs)
    for p, t in saved.items():
        what = [f"softmax(router_logits[{i}])" for i, r in enumerate(out.router_logits)
                if torch.allclose(t, r.softmax(-1))]
        print(f"  {label}: storage {p} {tuple(t.shape)} = {what or '?'}")
    step_loss(out).backward()
    return len(saved)


torch._dynamo.reset()
n_tc = count(torch.compile(model), "torch.compile")
torch._dynamo.reset()
n_mo = count(memopt.optimize(model, level=0), "memopt level 0")
print(f"(tokens, experts) storages saved: torch.compile {n_tc}, memopt level 0 {n_mo}")
assert n_tc == n_mo, "level-0 graph saves differ from torch.compile's (estimate not exact vs compile)"
