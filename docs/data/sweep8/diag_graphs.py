"""python diag_graphs.py NAME : dynamo's graphs of one training forward (a recording backend):
per graph the module paths (nn_module_stack, first two levels below the model) and the
graph-break reasons."""
import sys, collections
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import torch
torch.set_num_threads(1)
from sweep8_models import NEW
from benchmarks import zoo
from benchmarks.zoo_models import step_loss

model, inputs = zoo.build(NEW[sys.argv[1]], "tiny", "cpu", torch.float32)
graphs = []
def backend(gm, ex):
    paths = collections.Counter()
    for n in gm.graph.nodes:
        st = n.meta.get("nn_module_stack")
        if st:
            paths[list(st.values())[-1][0]] += 1
    graphs.append((len(gm.graph.nodes), paths))
    return gm.forward
torch._dynamo.reset()
c = torch.compile(model, backend=backend)
step_loss(c(**inputs)).backward()
for i, (n, p) in enumerate(graphs):
    print(f"graph {i}: {n} nodes; module paths: {sorted(p)[:40]}")
from torch._dynamo.utils import counters
for k, v in counters["graph_break"].items():
    print("break:", str(k)[:300], v)
