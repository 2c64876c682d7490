"""Offload under CUDA graphs (torch.compile's mode="reduce-overhead"). Measured on an H100
(docs/benchmarks.md, fifty-eighth session): each reloaded tensor is an input of a captured
partition made outside it, which cudagraph trees copy into their pool, so the 8-layer Llama
with ``offload_layers=4`` moved 2.18 GB to the host and still reserved 7.95 GB against
torch.compile's 7.87 GB. So a budget recomputes and does not offload under CUDA graphs, and an
offload the user sets is applied with a warning that says what it costs."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import memopt
from memopt.api import _STATES, MemoptBackend, cudagraphs_offload_note


class _Block(nn.Module):
    def __init__(self, d: int = 32):
        super().__init__()
        self.a, self.b = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.b(torch.nn.functional.gelu(self.a(x)))


class _Net(nn.Module):
    def __init__(self, n: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.pow(2).mean()


def _config(**kw):
    return memopt.report(memopt.optimize(_Net(), **kw)).config


@pytest.mark.parametrize(
    "kw, asked",
    [
        ({"offload_layers": 2}, "offload_layers=2 under CUDA graphs"),
        ({"sync": {0: (True, 1, False, 1)}}, "the sync dict under CUDA graphs"),
        ({"config": "Gemm+:3:-1"}, "offload plan string(s) Gemm+:3:-1 under CUDA graphs"),
        ({"budget": 0.5, "offload_layers": "auto"}, None),  # the planner's: it recomputes
        ({"level": 1}, None),
        ({"config": "Gemm+:1:-1"}, None),
    ],
)  # fmt: skip
def test_an_offload_the_user_set_is_said_to_save_little_under_cuda_graphs(kw, asked):
    note = cudagraphs_offload_note(_config(**kw))
    if asked is None:
        assert note is None
    else:
        assert note is not None and note.startswith(asked)
        assert "7.95 GB" in note and "max-autotune-no-cudagraphs" in note


def test_the_backend_says_it_once_for_a_region_with_cuda_graphs(monkeypatch):
    """A region compiled with CUDA graphs (fake CUDA inputs stand for a device) gets the CUDA
    graphs note and the offload note, each once; on the CPU neither is said."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import memopt.api as api

    monkeypatch.setattr(api, "RegionProgram", lambda *a, **k: None)  # no compile here
    opt = memopt.optimize(_Net(), offload_layers=1, mode="reduce-overhead")
    state = _STATES[opt]
    backend = MemoptBackend(state.config, state, {"triton.cudagraphs": True})
    gm = torch.fx.symbolic_trace(_Net())
    backend(gm, [torch.empty(4, 32)])
    assert state.notes == [] and not state.cuda_graphs
    with FakeTensorMode():
        on_cuda = [torch.empty(4, 32, device="cuda")]
    backend(gm, on_cuda)
    backend(gm, on_cuda)
    assert state.cuda_graphs and len(state.notes) == 2
    assert state.notes[1].startswith("offload_layers=1 under CUDA graphs saves little")


def test_a_budget_offers_no_tensor_for_offload_under_cuda_graphs(monkeypatch):
    """The one-region planner's problem: every saved tensor of a layer may go to the host
    (``offload_min_bytes=0``) without CUDA graphs, none with them."""
    import memopt.passes.plan_budget as plan_budget

    seen: list[int] = []
    build = plan_budget.build_planning_problem

    def recording(*a, **k):
        seen.append(k["min_offload_bytes"])
        return build(*a, **k)

    monkeypatch.setattr(plan_budget, "build_planning_problem", recording)
    for graphs in (False, True):
        torch._dynamo.reset()
        opt = memopt.optimize(_Net(), budget=0.8, offload_min_bytes=0)
        _STATES[opt].cuda_graphs = graphs  # as a region compiled with CUDA graphs sets it
        opt(torch.randn(16, 32, requires_grad=True)).backward()
        assert seen and set(seen) == {2**62 if graphs else 0}, (graphs, seen)
        seen.clear()
