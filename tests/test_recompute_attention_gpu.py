"""``Attention+`` on CUDA: the fused SDPA kernel (memory-efficient in fp32, flash or cuDNN in
bf16) rerun in backward gives torch.compile's gradients, and the saved bytes fall by exactly
the estimate. CUDA's graph-safe RNG functionalization saves no state for the rerun kernel."""

from __future__ import annotations

import pytest
import torch

import memopt
from memopt.measure import measure_saved
from tests.helpers import tiny_llama

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

B, S, HID, HEADS, KV, LAYERS = 2, 256, 256, 4, 2, 2


def _llama(dtype):
    torch.manual_seed(0)
    model = tiny_llama(
        hidden_size=HID,
        intermediate_size=512,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        vocab_size=256,
        max_position_embeddings=S,
        attn_implementation="sdpa",
    )
    return model.to("cuda", dtype)


def _step(model, compiled, ids):
    exclude = [*model.parameters(), *model.buffers(), ids]
    loss, saved = measure_saved(lambda: compiled(input_ids=ids, labels=ids).loss, exclude)
    loss.backward()
    return loss.detach().float(), [p.grad.float() for p in model.parameters()], saved.compiled


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_rerun_on_cuda(dtype):
    ids = torch.randint(0, 256, (B, S), device="cuda")
    torch._dynamo.reset()
    ref = _llama(dtype)
    loss_ref, grads_ref, _ = _step(ref, torch.compile(ref), ids)
    torch._dynamo.reset()
    m0 = _llama(dtype)
    _, _, saved0 = _step(m0, memopt.optimize(m0, level=0), ids)
    torch._dynamo.reset()
    m = _llama(dtype)
    att = memopt.optimize(m, level=0, config=["Attention+:1:-1"], strict=True)
    loss, grads, saved = _step(m, att, ids)
    row = next(r for r in memopt.report(att).to_dict()["plans"] if r["cluster_id"] == "Attention+")
    assert row["enabled"] and row["saving_bytes"] > 0
    assert saved0 - saved == row["saving_bytes"]  # no RNG state saved on CUDA
    (region,) = memopt.report(att).regions
    assert region.final_saved_bytes == saved
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(loss, loss_ref, **tol)
    for g, r in zip(grads, grads_ref):
        torch.testing.assert_close(g, r, **tol)
