"""python diag_b_saved_roots.py NAME : sweep6_models' NAME traced with a dynamic batch (dim 0
of every input marked dynamic, as `memopt plan` does) at batch 2 and at batch 3, Inductor's
default partition: memopt.facts' saved-activation accounting split into its parts (saved
storage roots, and the channels-last copies of graph inputs Inductor saves,
facts.layout_copied_inputs); prints each part's symbolic bytes and the copied inputs that only
one batch has."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))
import sympy
import torch
torch.set_num_threads(1)
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table  # Inductor's decompositions
from benchmarks import zoo
from benchmarks.zoo_models import step_loss
from memopt import facts
from sweep6_models import NEW

name = sys.argv[1]


def parts(batch):
    model, inputs = zoo.build(NEW[name], "tiny", "cpu", torch.float32, batch=batch)
    for v in inputs.values():
        torch._dynamo.mark_dynamic(v, 0)
    got = {}

    def part(joint, args, **kw):
        fw, bw = min_cut_rematerialization_partition(joint, args, **kw)
        nfo = kw["num_fwd_outputs"]
        copied = facts.layout_copied_inputs(fw, nfo)
        total = facts.saved_activation_bytes(fw, nfo)
        cp = sum((facts.nbytes_expr(facts.tensor_val(n)) for n in copied), sympy.Integer(0))
        got.update(total=sympy.expand(total), copies=sympy.expand(cp),
                   copied={(n.name, tuple(str(s) for s in facts.tensor_val(n).shape)) for n in copied},
                   n_saved=len(facts.saved_outputs(fw, nfo)))
        return fw, bw

    def backend(gm, ex):
        return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: g.forward,
                                     bw_compiler=lambda g, e: g.forward, partition_fn=part,
                                     decompositions=select_decomp_table())

    torch._dynamo.reset()
    step_loss(torch.compile(model, backend=backend)(**inputs)).backward()
    return got


a, b = parts(2), parts(3)
for k in ("n_saved", "total", "copies"):
    print(f"{k}: batch 2: {a[k]}   batch 3: {b[k]}")
print("copied inputs only at batch 2:", sorted(a["copied"] - b["copied"]))
print("copied inputs only at batch 3:", sorted(b["copied"] - a["copied"]))
