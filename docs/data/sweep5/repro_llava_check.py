"""check_model's steps on Llava (tiny), printing which gradients appear in which run.
cd docs/data/sweep5 && PYTHONPATH=.:../../.. python repro_llava_check.py"""
import sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__))); sys.path.insert(0, __import__("os").path.abspath(__import__("os").path.join(__import__("os").path.dirname(__file__), "../../..")))
import torch
torch.set_num_threads(1)
from benchmarks import zoo
from memopt import _torch_compat as compat
from sweep5_models import NEW

model, inputs = zoo.build(NEW["llava"], "tiny", "cpu", torch.float32)
with compat.no_compile_caches():
    c = zoo._compiled(model)
    l0, g0, base = zoo.one_step(model, c, inputs)
    o = zoo._compiled(model, level=1)
    l1, g1, lv = zoo.one_step(model, o, inputs)
    e = zoo.one_step(model, model, inputs)
    c2 = zoo.one_step(model, c, inputs)
print("losses", l0.item(), l1.item(), e[0].item(), c2[0].item())
for nm, g in (("compile", g0), ("memopt L1", g1), ("eager", e[1]), ("compile step2", c2[1])):
    print(nm, len(g))
print("compile - memopt:", sorted(set(g0) - set(g1)))
print("memopt - compile:", sorted(set(g1) - set(g0)))
print("compile - eager:", sorted(set(g0) - set(e[1])), "eager - compile:", sorted(set(e[1]) - set(g0)))
print("compile step2 vs step1:", sorted(set(g0) ^ set(c2[1])))
print("measured", base, "level1", lv)
