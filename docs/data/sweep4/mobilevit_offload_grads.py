"""MobileViT: offload_layers=K's gradients against torch.compile's (the inner layers, 61st session)."""
import sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import memopt
from benchmarks import zoo
from benchmarks.zoo_models import ZooModel
from memopt import _torch_compat as compat
from sweep4_models import MODELS
name, k = sys.argv[1], int(sys.argv[2])
entry = ZooModel(name, *MODELS[name])
with compat.no_compile_caches():
    model, inputs = zoo.build(entry, "tiny", "cpu", torch.float32)
    l0, g0, _ = zoo.one_step(model, zoo._compiled(model), inputs)
    opt = zoo._compiled(model, offload_layers=k, offload_min_bytes=0)
    l1, g1, _ = zoo.one_step(model, opt, inputs)
    rep = memopt.report(opt)
ok, err = zoo._agree(l0, g0, l1, g1, torch.float32)
print(f"{name} offload_layers={k}: offloaded {rep.offloaded_bytes()} B, losses {l0.item():.7f} {l1.item():.7f}, grads agree {ok} (max rel {err:.1e})")
print("layers", rep.regions[0].extra.get("layers"), "per layer", (rep.regions[0].extra.get("offload") or {}).get("bytes_per_layer"))
