"""torch.compile's ``mode=`` and ``options=`` through memopt: the Inductor settings they stand
for reach every region's compile (memopt's backend, by ``memopt.optimize`` or by name), bad
values are a memopt error at ``optimize`` time, and CUDA graphs are said (not yet measured)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memopt
from memopt import _torch_compat as compat
from memopt.errors import ConfigError


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))


@pytest.fixture
def patches(monkeypatch) -> list[dict]:
    """The config patches each region compiles with (memopt's own compat wrapper spied)."""
    seen: list[dict] = []
    real = compat.compile_fx

    def spy(gm, inputs, **kw):
        own = kw.get("config_patches", {})
        seen.append({k: v for k, v in own.items() if k != "custom_partitioner_fn"})
        return real(gm, inputs, **kw)

    monkeypatch.setattr(compat, "compile_fx", spy)
    return seen


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model(x).sum().backward()
    return x.grad


@pytest.mark.parametrize(
    "kw, want",
    [
        (
            {"mode": "max-autotune-no-cudagraphs"},
            {"max_autotune": True, "coordinate_descent_tuning": True},
        ),
        (
            {"options": {"epilogue_fusion": False, "max-autotune": False}},
            {
                "epilogue_fusion": False,
                "max_autotune": False,
            },
        ),  # fmt: skip
        ({"mode": "default"}, {}),
    ],
)
def test_mode_and_options_reach_every_regions_inductor_compile(kw, want, patches):
    torch._dynamo.reset()
    x = torch.randn(4, 8, requires_grad=True)
    opt = memopt.optimize(_mlp(), level=1, **kw)
    got = _step(opt, x.detach().requires_grad_())
    assert patches == [want]
    assert len(memopt.report(opt).regions) == 1
    torch._dynamo.reset()
    plain = _step(torch.compile(_mlp(), **kw), x.detach().requires_grad_())
    torch.testing.assert_close(got, plain)


def test_the_backend_by_name_takes_torch_compiles_mode(patches):
    torch._dynamo.reset()
    opt = torch.compile(_mlp(), backend="memopt", mode="max-autotune-no-cudagraphs")
    _step(opt, torch.randn(4, 8, requires_grad=True))
    assert patches == [{"max_autotune": True, "coordinate_descent_tuning": True}]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"mode": "fastest"}, "mode='fastest': Unrecognized mode=fastest, should be one of"),
        ({"options": {"max_autotun": True}}, "'max_autotun' is no Inductor setting \\(did you mean 'max_autotune'\\?\\)"),
        ({"options": ["max_autotune"]}, "options= takes a dict, got list"),
        ({"mode": "default", "options": {}}, "mode= or options=, not both"),
    ],
)  # fmt: skip
def test_a_bad_mode_or_option_is_a_memopt_error_before_any_compile(kw, message, patches):
    with pytest.raises(ConfigError, match=message):
        memopt.optimize(_mlp(), level=1, **kw)
    assert patches == []


def test_cuda_graphs_are_passed_on_and_said_for_a_cuda_region(patches):
    """On the CPU Inductor makes no CUDA graph and nothing is said; the setting still reaches
    the compile. A region with CUDA inputs gets the note (fake CUDA tensors stand for them)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memopt.api import _STATES, cudagraphs_note

    torch._dynamo.reset()
    opt = memopt.optimize(_mlp(), level=1, mode="reduce-overhead")
    _step(opt, torch.randn(4, 8, requires_grad=True))
    state = _STATES[opt]
    assert patches == [{"triton.cudagraphs": True}] and state.notes == [] and not state.cuda_graphs
    with FakeTensorMode():
        on_cuda = [torch.empty(4, 8, device="cuda")]
    note = cudagraphs_note({"triton.cudagraphs": True}, on_cuda)
    assert note is not None and "not the segments their private memory pools keep" in note
    assert cudagraphs_note({}, on_cuda) is None
    assert cudagraphs_note({"triton.cudagraphs": True}, [torch.empty(4, 8)]) is None
