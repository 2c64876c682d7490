"""python diag_moe.py [NAME] : which (tokens, experts) tensors plain torch.compile and memopt
(level 0) save for backward, and whether they are the router logits the model returns."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from benchmarks.zoo import build
from benchmarks.zoo_models import step_loss
from sweep6_models import NEW

name = sys.argv[1] if len(sys.argv) > 1 else "qwen3_moe"
model, inputs = build(NEW[name], "tiny", "cpu", torch.float32)
E = model.config.num_experts


def run(fn, label):
    saved = []

    def pack(t):
        if t.dim() == 2 and t.shape[-1] == E and t.is_floating_point():
            saved.append(t)
        return t

    with compat.no_compile_caches(), torch.autograd.graph.saved_tensors_hooks(
        torch.compiler.disable(pack), torch.compiler.disable(lambda t: t)
    ):
        torch.manual_seed(0)
        out = fn(**inputs)
    logits = out.router_logits
    ptrs = {r.untyped_storage().data_ptr(): i for i, r in enumerate(logits)}
    print(f"== {label}: {len(saved)} saved (tokens, {E}) tensors; the outputs' router_logits "
          f"storages {list(ptrs)}")
    seen = set()
    for t in saved:
        p = t.untyped_storage().data_ptr()
        if p in seen:
            continue
        seen.add(p)
        what = [f"router_logits[{i}]" for i, r in enumerate(logits) if torch.equal(t, r)]
        what += [f"softmax(router_logits[{i}])" for i, r in enumerate(logits)
                 if torch.allclose(t, r.softmax(-1))]
        print(f"   storage {p} {'(the output itself)' if p in ptrs else ''} equal to {what or '?'}")
    step_loss(out).backward()


torch._dynamo.reset()
run(torch.compile(model), "torch.compile")
torch._dynamo.reset()
run(memopt.optimize(model, level=0), "memopt level 0")
