"""CUDA checks of layer streaming and CPUAdamW (skipped without a GPU; see docs/params.md)."""

import pytest
import torch

from memopt.params import CPUAdamW, apply_param_offload
from tests.test_params_offload import batch, tiny_llama

pytestmark = pytest.mark.gpu


def _train(model, opt, steps, handle=None):
    losses = []
    for s in range(steps):
        x = batch(s).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("fused_backward", [False, True])
def test_cuda_streaming_training_matches_gpu_adamw(fused_backward):
    ref = tiny_llama(6).cuda()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3, fused=True)
    model = tiny_llama(6)  # built on the CPU; only resident parameters go to the GPU
    handle = apply_param_offload(model, 0.5, device="cuda")
    assert handle.cuda and handle._layers[0].host[0].is_pinned()
    opt = CPUAdamW(model.parameters(), lr=1e-3, param_offload=handle, fused_backward=fused_backward)
    a, b = _train(ref, opt_ref, 8), _train(model, opt, 8, handle)
    torch.testing.assert_close(b, a, rtol=2e-3, atol=2e-3)
    for p in model.parameters():
        assert p.grad is None  # every device gradient was freed after its D2H copy


def test_cuda_streaming_grads_match_exactly():
    ref = tiny_llama(6).cuda()
    model = tiny_llama(6).cuda()
    apply_param_offload(model, 0.5, keep_grads=True)
    x = batch().cuda()
    ref(x, labels=x).loss.backward()
    model(x, labels=x).loss.backward()
    torch.cuda.synchronize()
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad), name


def test_arena_keeps_reserved_memory_flat():
    model = tiny_llama(8).cuda()
    handle = apply_param_offload(model, 0.5)
    opt = CPUAdamW(model.parameters(), lr=1e-3, param_offload=handle)
    _train(model, opt, 3)
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    _train(model, opt, 20)
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() == before
