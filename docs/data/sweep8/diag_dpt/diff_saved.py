"""python diff_saved.py [small]: per saved tensor, plain torch.compile's measurement (saved-tensor
hooks) against memopt's level-0 prediction (the storage roots of the baseline forward graph's
saved outputs + channels-last copies), diffed as multisets of (shape, dtype, bytes).
Also dumps the Inductor output code of the plain compile's forward (TORCH_LOGS not needed:
we capture the fw graph memopt partitions)."""
import collections, os, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch
torch.set_num_threads(1)
import memopt
from memopt import facts
from memopt import _torch_compat as compat
import memopt.passes.pipeline as pl
from sweep8_models import NEW
import sweep8_models as sm
from benchmarks import zoo

small = len(sys.argv) > 1 and sys.argv[1] == "small"
if small:
    def dpt_small(size="tiny", batch=None):
        cfg = sm._config("DPTConfig", image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=int(os.environ.get("NL", 4)), num_attention_heads=2,
                         backbone_out_indices=eval(os.environ.get("IDX", "[0,1,2,3]")),
                         neck_hidden_sizes=eval(os.environ.get("NECK", "[16,16,32,32]")),
                         fusion_hidden_size=16,
                         reassemble_factors=eval(os.environ.get("RF", "[4,2,1,0.5]")),
                         head_in_index=-1, is_hybrid=False,
                         num_labels=4, use_auxiliary_head=os.environ.get("AUX", "1") == "1",
                         semantic_loss_ignore_index=255)
        g, b = sm._g(), batch or sm.B
        return sm._training(sm._tf().DPTForSemanticSegmentation(cfg)), {
            "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
            "labels": torch.randint(0, 4, (b, 32, 32), generator=g)}
    entry = sm.ZooModel("dpt_small", "vision", dpt_small)
else:
    entry = NEW["dpt"]

t0 = time.time()
model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)

# --- measured: plain torch.compile
with compat.no_compile_caches():
    compiled = zoo._compiled(model)
    _, _, base = zoo.one_step(model, compiled, inputs)
meas = [(t.shape, str(t.dtype).removeprefix("torch."), t.nbytes, t.stride, t.compiled) for t in base.tensors]
print(f"measured compiled={base.compiled} eager={base.eager} n={len(meas)}  ({time.time()-t0:.0f}s)")

# --- predicted: capture memopt's baseline fw graph
caught = []
orig = pl.saved_activation_bytes
def spy(fw, nfo, symbols, copied=None):
    caught.append((fw, nfo, tuple(copied or ())))
    return orig(fw, nfo, symbols, copied)
pl.saved_activation_bytes = spy
with compat.no_compile_caches():
    opt = zoo._compiled(model, level=1)
    zoo.one_step(model, opt, inputs)
rep = memopt.report(opt)
print("report saved_bytes (before, after):", rep.saved_bytes(), f"({time.time()-t0:.0f}s)")
pred = []
for fw, nfo, copied in caught[:1]:
    padding = compat.inductor_stride_padding(fw, nfo)
    roots = {}
    for n in facts.saved_outputs(fw, nfo):
        if n.op == "placeholder":
            continue
        r = facts.storage_root(n)
        if r.op != "placeholder" and facts.tensor_val(r) is not None:
            roots.setdefault(r, []).append(n)
    for r, ns in roots.items():
        v = facts.tensor_val(r)
        b = int(facts.padded_nbytes(r, padding))
        pred.append((tuple(v.shape), str(v.dtype).removeprefix("torch."), b, tuple(v.stride()),
                     r.name, str(r.target), [x.name for x in ns]))
    for c in copied:
        v = facts.tensor_val(c)
        pred.append((tuple(v.shape), str(v.dtype).removeprefix("torch."), int(facts.nbytes_expr(v)),
                     "cl-copy", c.name, "layout copy", []))
    with open(os.path.join(HERE, f"fw_graph{'_small' if small else ''}.txt"), "w") as f:
        f.write(fw.print_readable(print_output=False))
print("captured fw graphs:", len(caught), "pred total:", sum(p[2] for p in pred))

key = lambda shape, dt, b: (tuple(shape), dt, b)
M = collections.Counter(key(*m[:3]) for m in meas if m[4])
P = collections.Counter(key(*p[:3]) for p in pred)
out = []
out.append(f"measured(compiled) {sum(k[2]*c for k,c in M.items())}  predicted {sum(k[2]*c for k,c in P.items())}")
out.append("only measured:")
for k, c in sorted((M - P).items(), key=str):
    ex = [m for m in meas if key(*m[:3]) == k]
    out.append(f"  {c} x {k}  stride={ex[0][3]}")
out.append("only predicted:")
for k, c in sorted((P - M).items(), key=str):
    ex = [p for p in pred if key(*p[:3]) == k]
    out.append(f"  {c} x {k}  e.g. {[(e[4], e[5], e[6][:3]) for e in ex[:4]]}")
out.append("all measured (shape, dtype, bytes, stride):")
out += [f"  {m}" for m in meas]
out.append("all predicted (shape, dtype, bytes, stride, root, target, saved names):")
out += [f"  {p}" for p in pred]
txt = "\n".join(out)
print(txt[:6000])
with open(os.path.join(HERE, f"diff{'_small' if small else ''}.txt"), "w") as f:
    f.write(txt + "\n")
print(f"done {time.time()-t0:.0f}s")
