"""python diag_step_saved.py NAME : torch.compile's measured saved storages (shape, dtype,
bytes, compiled?) beside memopt level 0's per-run predicted bytes and saved inputs."""
import collections, sys
sys.path.insert(0, "."); sys.path.insert(0, "../../..")
import torch
torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from memopt.step_report import step_input_bytes
from benchmarks.zoo import build, one_step, _compiled
from sweep7_models import NEW

name = sys.argv[1]
with compat.no_compile_caches():
    model, inputs = build(NEW[name], "tiny", "cpu", torch.float32)
    _, _, base = one_step(model, _compiled(model), inputs)
    opt = _compiled(model, level=0)
    _, _, mine = one_step(model, opt, inputs)
rep = memopt.report(opt)
print(f"torch.compile measured {base.compiled} (eager {base.eager}), memopt level0 measured "
      f"{mine.compiled}, predicted {rep.saved_bytes()[0]}")
c = collections.Counter((str(t.dtype), t.nbytes, t.shape, t.compiled) for t in mine.tensors)
print("== memopt level 0 measured saved storages (dtype, bytes, shape, compiled) x count")
for k, n in sorted(c.items(), key=lambda kv: -kv[0][1]):
    print("  ", k, "x", n)
runs = rep.step_runs()
print("== runs:", len(runs), "step_input_bytes:", step_input_bytes(runs, 0))
for i, (r, keys) in enumerate(runs):
    print(f"  run {i}: baseline_saved_bytes={r.baseline_saved_bytes} keys={list(keys)[:6]}")
    for e in r.extra.get("saved_inputs") or ():
        print("     saved input:", {k: e[k] for k in e if k != "saved"}, "saved:", e["saved"])
