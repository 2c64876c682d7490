"""Per forward output of each region: its FX name, whether the backward reads it, its storage in Inductor's replay, and the measured saved tensors; to find the CUDA shortfall of the compiled saved count (docs/zoo.md, sixty-first session).  python docs/data/logs/s61/diag_made.py OUT.json resnet,llama   (DEV=cpu on CPU)"""
import json, os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "benchmarks")]
import torch
import memopt
from memopt import inductor_buffers as ib
from benchmarks import zoo
from benchmarks.zoo_models import BY_NAME
from memopt import _torch_compat as compat
dump = []
orig = ib.saved_made_bytes
def spy(fw, bw):
    f = ib.replay(fw)
    rows = [(n, n in bw.inputs, o, bw.inputs.get(n)) for n, o in zip(fw.fx_outputs, f.outputs)]
    ev = {e.name: (e.kind, e.nbytes, e.of, e.kernel) for e in fw.events}
    dump.append({"rows": [(n, b, (list(o) if o else None), bi, ev.get(n)) for n, b, o, bi in rows],
                 "outputs": list(fw.outputs), "bw_inputs": dict(bw.inputs), "fw_inputs": dict(fw.inputs), "device": fw.device})
    return orig(fw, bw)
ib.saved_made_bytes = spy
out = {}
for name in sys.argv[2].split(","):
    dump.clear()
    with compat.no_compile_caches():
        model, inputs = zoo.build(BY_NAME[name], "tiny", os.environ.get("DEV", "cuda"), torch.float32)
        opt = zoo._compiled(model, level=0)
        _, _, m = zoo.one_step(model, opt, inputs)
        rep = memopt.report(opt)
    meas = sorted(((tuple(t.shape), str(t.dtype), t.nbytes, str(getattr(t, "device", ""))) for t in m.tensors), key=str)
    out[name] = {"fx": rep.saved_bytes()[1], "compiled": rep.compiled_saved_bytes(), "measured": m.compiled, "dump": [dict(d, outputs=[str(o) for o in d["outputs"]]) for d in dump], "measured_tensors": [list(map(str, t)) for t in meas]}
    print(name, out[name]["fx"], out[name]["compiled"], out[name]["measured"], flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=0, default=str)
