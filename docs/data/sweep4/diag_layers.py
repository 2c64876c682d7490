"""Which layers offload_layers=K detects and offloads: per region, the detected layer names, the
offload summary (bytes per layer, saved values); the model's layer containers as api sees them.
python run_one.py diag_layers NAME [K]  (3 steps: a step of several regions plans after its first run)"""
import sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from memopt import api
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel, step_loss
from memopt import _torch_compat as compat
from sweep4_models import MODELS

name = sys.argv[1]
k = int(sys.argv[2]) if len(sys.argv) > 2 else 1
kind, build, needs = MODELS[name]
entry = ZooModel(name, kind, build, needs)
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    print("api layer containers:", api._layer_containers(model))
    torch._dynamo.reset()
    opt = memopt.optimize(model, offload_layers=k, offload_min_bytes=0)
    for step in range(3):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        step_loss(opt(**inputs)).backward()
        rep = memopt.report(opt)
        print(f"--- after step {step}: regions={len(rep.regions)} offloaded_bytes={rep.offloaded_bytes()}")
        for r in rep.regions:
            print(f"region {r.index}: runs={rep.runs(r)} layers={r.extra.get('layers')}")
            off = r.extra.get("offload")
            if off:
                print(off["text"])
        if rep.step is not None:
            print("step:", {kk: v for kk, v in rep.step.to_dict().items() if "offload" in kk or "layer" in kk})
    print("notes:", list(rep.notes))
