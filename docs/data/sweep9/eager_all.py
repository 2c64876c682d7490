"""python eager_all.py [NAME...] : build + eager forward/backward of each builder."""
import sys, time, traceback
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
sys.path.insert(0, __import__("os").path.abspath(__import__("os").path.join(__import__("os").path.dirname(__file__), "../../..")))
import torch
torch.set_num_threads(1)
from benchmarks.zoo_models import step_loss
from sweep9_models import NEW
for n in sys.argv[1:] or list(NEW):
    t = time.time()
    try:
        m, i = NEW[n].build("tiny")
        l = step_loss(m(**i)); l.backward()
        ng = sum(p.grad is not None for p in m.parameters())
        print(n, type(m).__name__, "loss", float(l), "grads", ng, "/", len(list(m.parameters())),
              "params", sum(p.numel() for p in m.parameters()), f"{time.time()-t:.1f}s", flush=True)
    except Exception as e:
        print(n, "FAIL", type(e).__name__, str(e)[:800], flush=True); traceback.print_exc()
