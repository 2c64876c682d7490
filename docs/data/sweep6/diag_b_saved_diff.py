"""python diag_b_saved_diff.py NAME : the saved-for-backward tensors of Inductor's default
partition (min_cut_rematerialization_partition) of sweep6_models' NAME traced with a dynamic
batch (torch._dynamo.mark_dynamic on dim 0 of every input, as `memopt plan` does) at batch 2
and at batch 3: prints the saved tensors (op, shape, dtype) that only one of the two saves."""
import collections, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))
import torch
torch.set_num_threads(1)
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table  # Inductor's decompositions
from benchmarks import zoo
from benchmarks.zoo_models import step_loss
from sweep6_models import NEW

name = sys.argv[1]
static = "static" in sys.argv[2:]  # no mark_dynamic: concrete sizes, dim 0 shown as B


def saved_of(batch):
    model, inputs = zoo.build(NEW[name], "tiny", "cpu", torch.float32, batch=batch)
    for v in inputs.values():
        if not static:
            torch._dynamo.mark_dynamic(v, 0)
    got = []

    def fw(gm, ex):
        out = gm.graph.output_node().args[0]
        for a in out:
            if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
                v = a.meta["val"]
                if a.op == "placeholder":
                    src = "input " + a.name
                else:
                    t = a.args[0].target if getattr(a.target, "__name__", "") == "getitem" else a.target
                    src = str(t).split(".")[-2] if "." in str(t) else str(t)
                got.append((src,
                            tuple("B" if static and i == 0 and s == batch else re.sub(r'\bs\d+\b', 'B', str(s)) for i, s in enumerate(v.shape)), str(v.dtype).split(".")[-1]))
        return gm.forward

    def backend(gm, ex):
        return aot_module_simplified(gm, ex, fw_compiler=fw, bw_compiler=lambda g, e: g.forward,
                                     partition_fn=min_cut_rematerialization_partition,
                                     decompositions=select_decomp_table())

    torch._dynamo.reset()
    step_loss(torch.compile(model, backend=backend)(**inputs)).backward()
    return collections.Counter(got)


a, b = saved_of(2), saved_of(3)
print(f"{name} ({'static' if static else 'dynamic batch'}): forward outputs (loss, saved) at batch 2: {sum(a.values())}, at batch 3: {sum(b.values())}")
for k in sorted(set(a) | set(b)):
    if a[k] != b[k]:
        print(f"  {k}: batch 2 x{a[k]}, batch 3 x{b[k]}")
