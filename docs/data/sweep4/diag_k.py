"""offload_layers=K at the edges of the layer count: api's container count vs the graph's detected
layers.  python run_one.py diag_k NAME K"""
import sys, traceback, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from memopt import api
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel, step_loss
from memopt import _torch_compat as compat
from sweep4_models import MODELS

args = ":".join(sys.argv[1:]).split(":")  # NAME K or NAME:K (the queue passes one token)
name, k = args[0], int(args[1])
entry = ZooModel(name, *MODELS[name])
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    print("api layer containers:", api._layer_containers(model), flush=True)
    torch._dynamo.reset()
    try:
        opt = memopt.optimize(model, offload_layers=k, offload_min_bytes=0)
        model.zero_grad(set_to_none=True)
        step_loss(opt(**inputs)).backward()
        rep = memopt.report(opt)
        print(f"K={k}: ran; offloaded_bytes={rep.offloaded_bytes()}")
        for r in rep.regions:
            off = r.extra.get("offload") or {}
            print(f"region {r.index}: layers={r.extra.get('layers')} bytes_per_layer={off.get('bytes_per_layer')} notes={off.get('notes')}")
    except Exception as e:
        traceback.print_exc(limit=3)
        print(f"K={k}: {type(e).__module__}.{type(e).__name__}: {str(e)[:600]}")
