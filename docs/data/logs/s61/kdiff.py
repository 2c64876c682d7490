"""Per-kernel GPU times of one zoo variant (all kernels), to diff two plans."""
import json, os, sys, time, statistics
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "benchmarks")]
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
import memopt
from benchmarks.zoo import build
from benchmarks.zoo_models import BY_NAME, step_loss
from memopt import _torch_compat as compat

model, variant, out = sys.argv[1], sys.argv[2], sys.argv[3]
with compat.no_compile_caches():
    m, x = build(BY_NAME[model], "gpu", "cuda", torch.bfloat16)
    c = torch.compile(m) if variant == "compile" else memopt.optimize(m, budget=int(variant))
    def step():
        m.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        step_loss(c(**x)).backward()
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
ks = [e for e in prof.key_averages() if e.self_device_time_total > 0 and e.device_type == DeviceType.CUDA]
rows = sorted(((e.key, e.self_device_time_total / 5e3, e.count / 5) for e in ks), key=lambda r: -r[1])
rep = str(memopt.report(c)) if variant != "compile" else ""
json.dump({"model": model, "variant": variant, "env": os.environ.get("MEMOPT_DISABLE_PASSES"), "kernels": rows,
           "gpu_ms": sum(r[1] for r in rows if not r[0].startswith(("Memcpy", "Memset"))), "report": rep[-8000:]}, open(out, "w"), indent=0)
print(variant, os.environ.get("MEMOPT_DISABLE_PASSES"), "gpu_ms", sum(r[1] for r in rows if not r[0].startswith(("Memcpy", "Memset"))))
