"""python diag_offload_layers.py NAME [STEPS] : memopt.optimize(offload_layers=1, offload_min_bytes=0),
two steps; per region: the layers memopt detected (extra['layers']), offload summary, warnings;
the step's offload (report.step) and the model's layers (memopt.api.model_layers)."""
import sys, warnings, logging
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import torch
torch.set_num_threads(1)
logging.basicConfig(level=logging.WARNING)
from sweep8_models import NEW
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import step_loss
from memopt import _torch_compat as compat

name = sys.argv[1]
model, inputs = zoo.build(NEW[name], "tiny", "cpu", torch.float32)
try:
    from memopt.api import model_layers
    print("model layers:", model_layers(model))
except Exception as e:
    print("model_layers:", type(e).__name__, e)
with compat.no_compile_caches():
    o = memopt.optimize(model, offload_layers=1, offload_min_bytes=0)
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
        model.zero_grad(set_to_none=True)
        step_loss(o(**inputs)).backward()
rep = memopt.report(o)
for r in rep.regions:
    off = r.extra.get("offload")
    print(f"region {r.index}: layers={r.extra.get('layers')} saved={r.baseline_saved_bytes}")
    print("   offload:", (off or {}).get("text", off) if isinstance(off, dict) else off)
    for w in r.warnings:
        print("   warning:", w[:400])
st = rep.step
if st is not None:
    print("step offloaded_bytes:", st.offloaded_bytes, "offload_runs:", st.offload_runs,
          "offload_steps:", st.offload_steps, "sequence:", st.sequence)
    for k in ("notes", "offload_notes", "warnings"):
        if hasattr(st, k):
            print("step", k, getattr(st, k))
print(str(rep)[:4000])
