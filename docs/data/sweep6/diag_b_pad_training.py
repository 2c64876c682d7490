"""python diag_b_pad_training.py : repro_b_pad_symbol's PadConv trained with
memopt.optimize(dynamic=True): does the report's ConstantPadNd row keep a raw symbol / no
value in training too (not only in `memopt plan`), and are the gradients still torch.compile's?"""
import os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
torch.set_num_threads(1)
import memopt
from repro_b_pad_symbol import build

model, inputs = build(3)
torch._dynamo.reset()
c = torch.compile(model, dynamic=True)
c(**inputs).backward()
ref = {n: p.grad.clone() for n, p in model.named_parameters()}
model.zero_grad(set_to_none=True)
torch._dynamo.reset()
o = memopt.optimize(model, dynamic=True, level=1)
o(**inputs).backward()
same = all(torch.allclose(p.grad, ref[n], rtol=1e-4, atol=1e-6) for n, p in model.named_parameters())
txt = str(memopt.report(o))
print(txt[:2500])
rows = [l for l in txt.splitlines() if "ConstantPadNd" in l]
print("ConstantPadNd rows:", rows, "\ngrads = torch.compile's:", same,
      "\nraw symbols:", sorted(set(re.findall(r"\bs\d+\b", txt))))
