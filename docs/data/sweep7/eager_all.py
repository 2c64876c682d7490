import sys, time, torch
torch.set_num_threads(1)
sys.path.insert(0, ".")
from sweep7_models import NEW
from benchmarks.zoo_models import step_loss
names = sys.argv[1:] or list(NEW)
for n in names:
    t = time.time()
    try:
        torch.manual_seed(0)
        m, i = NEW[n].build()
        l = step_loss(m(**i)); l.backward()
        print(n, type(m).__name__, "loss", round(l.item(), 4), "ngrad", sum(p.grad is not None for p in m.parameters()), "/", sum(1 for _ in m.parameters()), f"{time.time()-t:.1f}s", flush=True)
    except Exception as e:
        print(n, "FAIL", type(e).__name__, str(e)[:300], flush=True)
