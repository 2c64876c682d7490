"""python diag_moe_graph.py [NAME] : the (tokens, experts) float tensors the partitioned forward
saves under torch.compile's own pipeline (Inductor's partitioner, graphs printed by a
forward-compiler wrapper) -- to tell whether the two softmax copies torch.compile saves are
in its FX graph or made by Inductor."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.compile_fx import compile_fx_inner
from benchmarks.zoo import build
from benchmarks.zoo_models import step_loss
from sweep6_models import NEW

name = sys.argv[1] if len(sys.argv) > 1 else "qwen3_moe"
model, inputs = build(NEW[name], "tiny", "cpu", torch.float32)
E = model.config.num_experts


def fw_compiler(gm, ex):
    outs = gm.graph.output_node().args[0]
    for n in outs:
        v = n.meta.get("val") if hasattr(n, "meta") else None
        if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[-1] == E and v.is_floating_point():
            print("  fw output", n.name, n.op, n.target, tuple(v.shape), flush=True)
    print("  fw outputs:", len(outs), flush=True)
    return gm


def backend(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=fw_compiler, bw_compiler=lambda g, e: g,
                                 partition_fn=min_cut_rematerialization_partition)


torch._dynamo.reset()
out = torch.compile(model, backend=backend)(**inputs)
step_loss(out).backward()
