"""GPU evidence for the core (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

import memopt
from memopt.demo import TinyGPT

pytestmark = pytest.mark.gpu


def test_level1_lowers_peak_memory_bf16_and_matches_loss():
    torch.manual_seed(0)
    model = TinyGPT(vocab=4096, d=512, heads=8, layers=4).cuda().to(torch.bfloat16)
    ids = torch.randint(0, 4096, (8, 512), device="cuda")

    def peak_and_loss(compiled):
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            loss = compiled(ids, ids)
            loss.backward()
            torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(), loss.detach()

    torch._dynamo.reset()
    p0, l0 = peak_and_loss(torch.compile(model))
    torch._dynamo.reset()
    opt = memopt.optimize(model, level=1)
    p1, l1 = peak_and_loss(opt)
    before, after = memopt.report(opt).saved_bytes()
    assert p1 < p0
    # the peak falls by at least half of the predicted saved-activation drop
    assert p0 - p1 >= 0.5 * (before - after), (p0, p1, before, after)
    torch.testing.assert_close(l1.float(), l0.float(), rtol=2e-2, atol=2e-2)
