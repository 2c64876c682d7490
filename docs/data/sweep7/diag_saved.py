"""python diag_saved.py NAME : level-0 saved storages, measured (plain torch.compile and memopt
level 0, saved-tensor hooks) beside memopt's estimate, saved node by saved node."""
import collections, sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
import memopt
from memopt import facts, _torch_compat as compat
from memopt.passes import pipeline  # the module the partitioner hook runs (not `passes.pipeline`)
from benchmarks.zoo import build, one_step, _compiled
from sweep7_models import NEW

name = sys.argv[1]
dumped = []
orig = pipeline.saved_activation_bytes


def spy(fw, num_fwd_outputs, symbols, copied=None):
    rows = []
    for n in facts.saved_outputs(fw, num_fwd_outputs):
        r = facts.storage_root(n)
        v = facts.tensor_val(r)
        rows.append((n.name, r.name, r.op, str(v.dtype), tuple(v.shape), str(facts.nbytes_expr(v))))
    dumped.append(rows)
    return orig(fw, num_fwd_outputs, symbols, copied)


pipeline.saved_activation_bytes = spy


def listing(saved):
    c = collections.Counter((str(t.dtype), t.nbytes, t.shape) for t in saved.tensors if t.compiled)
    return sorted(c.items(), key=lambda kv: -kv[0][1])


with compat.no_compile_caches():
    model, inputs = build(NEW[name], "tiny", "cpu", torch.float32)
    _, _, base = one_step(model, _compiled(model), inputs)
    opt = _compiled(model, level=0)
    _, _, mine = one_step(model, opt, inputs)
rep = memopt.report(opt)
print(f"torch.compile measured {base.compiled}, memopt level0 measured {mine.compiled}, "
      f"predicted {rep.saved_bytes()[0]}")
lb, lm = listing(base), listing(mine)
print("== torch.compile saved (dtype, bytes, shape) x count")
for k, c in lb:
    print("  ", k, "x", c)
print("== memopt level 0 saved, only where it differs from torch.compile's")
print("   only torch.compile:", [kv for kv in lb if kv not in lm])
print("   only memopt:", [kv for kv in lm if kv not in lb])
for i, rows in enumerate(dumped):
    print(f"== graph {i}: memopt's saved outputs (node, storage root, op, dtype, shape, bytes)")
    for row in rows:
        print("  ", row)
