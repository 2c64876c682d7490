import sys, time, traceback, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
from sweep4_models import MODELS
from benchmarks.zoo_models import step_loss
names = sys.argv[1:] or list(MODELS)
for n in names:
    t = time.time()
    try:
        torch.manual_seed(0)
        m, inp = MODELS[n][1]()
        torch.manual_seed(0)
        loss = step_loss(m(**inp)); loss.backward()
        nog = [k for k, p in m.named_parameters() if p.grad is None]
        print(f"{n}: OK loss={loss.item():.4f} params={sum(p.numel() for p in m.parameters())} nograd={len(nog)} {nog[:4]} {time.time()-t:.1f}s", flush=True)
    except Exception as e:
        print(f"{n}: FAIL {type(e).__name__}: {str(e)[:300]}", flush=True)
