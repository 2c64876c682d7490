"""Layer streaming under torch.compile(model) on the CPU.

The streamer's hooks are ``torch.compiler.disable``-d, so dynamo graph-breaks at each streamed
layer's hooks and runs them eagerly; the layers' bodies compile.
"""

import torch

from memopt.params import CPUAdamW, apply_param_offload
from tests.test_params_offload import batch, tiny_llama


def test_compiled_model_streams_and_trains_like_eager():
    ref, model = tiny_llama(4), tiny_llama(4)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    handle = apply_param_offload(model, 0.5)
    opt = CPUAdamW(model.parameters(), lr=1e-2, param_offload=handle)
    compiled = torch.compile(model, backend="aot_eager")
    losses, losses_ref = [], []
    for s in range(3):
        x = batch(s)
        for m, o, out in ((compiled, opt, losses), (ref, opt_ref, losses_ref)):
            loss = m(x, labels=x).loss
            loss.backward()
            o.step()
            o.zero_grad()
            out.append(loss.item())
    torch.testing.assert_close(losses, losses_ref, rtol=1e-5, atol=1e-5)
    assert handle.loads > 0
