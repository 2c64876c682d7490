"""The channels-last copies Inductor's layout optimization saves of a convolution's input
(CPU: always on with oneDNN): counted when the input is a graph input, and when it is a view of
one (CogVideoX reshapes its 5-D latents to 4-D frames for the patch convolution: the estimate
was 16,384 B short, one (4, 4, 16, 16) fp32 copy)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memopt
from benchmarks.zoo import _compiled, one_step
from memopt import _torch_compat as compat


class _Patches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.lin = nn.Conv2d(4, 32, 2, stride=2), nn.Linear(32, 32)

    def forward(self, x):
        if x.dim() == 5:
            x = x.reshape(-1, *x.shape[2:])  # frames of a video latent
        h = self.conv(x).flatten(2).transpose(1, 2)
        return self.lin(torch.tanh(h)).square().mean()


@pytest.mark.parametrize("shape", [(4, 4, 16, 16), (2, 2, 4, 16, 16)])
def test_a_convolutions_input_copy_is_counted_through_a_view(shape):
    torch.manual_seed(0)
    model, inputs = _Patches(), {"x": torch.randn(*shape)}
    with compat.no_compile_caches():
        _, _, measured = one_step(model, _compiled(model), inputs)
        opt = _compiled(model, level=0)
        one_step(model, opt, inputs)
    torch._dynamo.reset()
    predicted = memopt.report(opt).saved_bytes()[0]
    # the copy (16,384 B), the conv output, tanh's and the linear's saved tensors
    assert predicted == measured.compiled == 116_736
