"""An estimate miss, per tensor: every saved output memopt's baseline forward graph counts
(facts.saved_activation_bytes, wrapped at run time: nothing edited) vs every storage the plain
torch.compile step saves (measure_saved).  python run_one.py diag_saved NAME"""
import collections, sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from memopt import facts
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel
from memopt import _torch_compat as compat
from sweep4_models import MODELS

name = sys.argv[1]
kind, build, needs = MODELS[name]
entry = ZooModel(name, kind, build, needs)
calls = []
orig = facts.saved_activation_bytes


def wrapped(fw, num_fwd_outputs, copied=None):
    rows = []
    for n in facts.saved_outputs(fw, num_fwd_outputs):
        r = facts.storage_root(n)
        v = facts.tensor_val(n)
        rv = facts.tensor_val(r)
        rows.append((n.name, r.name, r.op, tuple(v.shape), str(v.dtype), tuple(v.stride()),
                     str(facts.nbytes_expr(rv)) if rv is not None else None))
    calls.append(rows)
    return orig(fw, num_fwd_outputs, copied)


facts.saved_activation_bytes = wrapped
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    torch._dynamo.reset()
    _, _, base = zoo.one_step(model, torch.compile(model), inputs)
    torch._dynamo.reset()
    opt = zoo._compiled(model, level=1)
    _, _, lvl1 = zoo.one_step(model, opt, inputs)
    rep = memopt.report(opt)
print("predicted (lvl0, lvl1):", rep.saved_bytes(), "measured compile:", base.compiled,
      "eager", base.eager, "measured lvl1:", lvl1.compiled)
for r in rep.regions:
    print(f"region {r.index}: baseline {r.baseline_saved_bytes} = {r.baseline_saved_symbolic}; "
          f"saved_inputs={r.extra.get('saved_inputs')}")
print(f"--- facts.saved_activation_bytes calls: {len(calls)}; the first (baseline forward):")
seen = set()
for row in calls[0]:
    tag = "" if row[1] not in seen else " (root already counted)"
    seen.add(row[1])
    print("  ", row, tag)
pred = collections.Counter()
for row in calls[0]:
    if row[2] != "placeholder":
        pred[(row[1], row[6])] = 1
print("--- measured storages under torch.compile (shape, dtype, stride, nbytes, compiled) x count:")
c = collections.Counter((t.shape, str(t.dtype), t.stride, t.nbytes, t.compiled) for t in base.tensors)
for k, v in sorted(c.items(), key=lambda kv: -kv[0][3] * kv[1]):
    print("  ", k, "x", v)
print("--- measured storages under memopt level 1:")
c = collections.Counter((t.shape, str(t.dtype), t.stride, t.nbytes, t.compiled) for t in lvl1.tensors)
for k, v in sorted(c.items(), key=lambda kv: -kv[0][3] * kv[1]):
    print("  ", k, "x", v)
