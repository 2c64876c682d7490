"""Python floats under ``dynamic=True``: dynamo passes them as 0-d tensors whose fakes carry a
float symbol, and AOTAutograd's tensorify pass asks dynamo to restart for a float it has not
specialized. A step plan compiles a region again at run time, outside dynamo: that compile
raised ``TensorifyScalarRestartAnalysis`` (wav2vec2, the dynamic zoo) or, with the float's
fake, ``DataDependentOutputException``. Now it compiles as dynamo did, with the gradients of
eager."""

from __future__ import annotations

import torch
from torch import nn

import memopt
from memopt import _torch_compat as compat


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x, f):
        return x + self.b(torch.relu(self.a(x)) * f)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block() for _ in range(2))  # one a region

    def forward(self, x, f):
        for i, layer in enumerate(self.layers):
            x = layer(x, f)
            if i == 0:
                torch._dynamo.graph_break()  # two regions: a step plan, compiled per run
        return x.square().mean()


def _grads(model, run, x, f):
    model.zero_grad(set_to_none=True)
    run(x, f).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_a_float_argument_under_a_step_plan_compiles_again_with_eagers_gradients():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Net()
    with compat.no_compile_caches():
        opt = memopt.optimize(model, budget=0.5, dynamic=True)
        for b, f in ((4, 0.5), (6, 0.7), (6, 0.9)):
            x = torch.randn(b, 8, 16)
            got, want = _grads(model, opt, x, f), _grads(model, model, x, f)
            for k in want:
                torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5)
    rep = memopt.report(opt)
    assert rep.step is not None  # the step was planned
    assert len(rep.regions) > 2  # and a region compiled again for a run of it, at run time


def test_tracing_restores_the_specialized_floats():
    from torch._dynamo.symbolic_convert import TensorifyState

    TensorifyState.clear()
    TensorifyState.specialize("zf1")
    saved = compat.tracing_context()  # outside dynamo: no context, the floats
    TensorifyState.clear()
    TensorifyState.specialize("zf9")
    with compat.tracing(saved):
        assert TensorifyState.force_specializations == {"zf1"}
    assert TensorifyState.force_specializations == {"zf9"}
    TensorifyState.clear()
