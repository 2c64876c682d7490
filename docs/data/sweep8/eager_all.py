"""python eager_all.py : build every sweep-8 model and run one eager forward+backward."""
import sys, time, traceback
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import torch
torch.set_num_threads(1)
from sweep8_models import NEW  # noqa (puts the repo root on sys.path)
from benchmarks import zoo
from benchmarks.zoo_models import step_loss
from sweep8_models import NEW
for n in (sys.argv[1:] or NEW):
    t = time.time()
    try:
        m, i = zoo.build(NEW[n], "tiny", "cpu", torch.float32)
        l = step_loss(m(**i)); l.backward()
        ng = sum(p.grad is not None for p in m.parameters()); np_ = sum(1 for _ in m.parameters())
        print(n, type(m).__name__, "loss", round(l.item(), 4), f"grads {ng}/{np_}",
              "params", sum(p.numel() for p in m.parameters()), f"{time.time()-t:.1f}s", flush=True)
    except Exception as e:
        print(n, "FAILED", type(e).__name__, str(e)[:300], flush=True)
        traceback.print_exc(limit=-3)
