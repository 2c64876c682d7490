"""python diag_b_wavlm_region.py : `memopt plan sweep6_models:wavlm --batch 2` in-process with
memopt.cli.trace.step_profile wrapped: per region, the forward's saved outputs (op, shape, what
they alias) next to the liveness profile's saved bytes and facts.saved_activation_bytes, to find
the 25472*batch the peak model leaves out of the saved activations (bug 5)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch
torch.set_num_threads(1)
import memopt.cli.trace as tr
from memopt import facts
from memopt.cli.main import main

orig = tr.step_profile
k = [0]


def wrapped(fw, bw, nfo, symbols, static=(), **kw):
    prof = orig(fw, bw, nfo, symbols, static, **kw)
    print(f"--- region {k[0]}: liveness saved {prof.saved}, inputs {prof.inputs}, gradients {prof.gradients}; "
          f"facts.saved_activation_bytes {symbols.readable(facts.saved_activation_bytes(fw, nfo))}")
    for n in facts.saved_outputs(fw, nfo):
        r = facts.storage_root(n)
        v = facts.tensor_val(n)
        print(f"    saved {n.name} op={n.op}:{getattr(n.target, '__name__', n.target)} shape={tuple(v.shape)} "
              f"root={r.name} ({r.op}) root_val_is_tensor={isinstance(r.meta.get('val'), torch.Tensor)}")
    k[0] += 1
    return prof


tr.step_profile = wrapped
main(["plan", "sweep6_models:wavlm", "--batch", "2", "--device-kind", "cpu"])
