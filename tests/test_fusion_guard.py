"""memopt's fusion guard (``fusion_guard=True``, or ``"auto"``): Inductor's horizontal fusion of a Llama
block's two norm weight-gradient reductions, and of the SiLU backward's parts, keeps the MLP's
input gradients and the recomputed residual alive across the attention backward; the planner's
model runs every node where the FX graph has it. Measured by Inductor's own buffer plan (the
region report's ``inductor`` section) against the model's predicted peak, on the CPU."""

from __future__ import annotations

import pytest
import torch

import memopt
from memopt import _torch_compat as compat
from memopt import api
from memopt.config import resolve_config
from memopt.regions import GUARD_EXCESS
from tests.helpers import tiny_llama


def _llama_step(opt=None) -> tuple[torch.nn.Module, torch.Tensor]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny_llama()
    ids = torch.randint(1, 128, (4, 64))
    run = opt(model) if opt is not None else model
    loss = run(input_ids=ids, labels=ids).loss
    loss.backward()
    return (run if opt is not None else model), loss.detach()


def test_the_guard_keeps_inductors_peak_at_the_model_s(monkeypatch, tmp_path):
    """``"auto"`` compiles the region unguarded, finds its Inductor plan over the model by more
    than GUARD_EXCESS and compiles it again with the guard (``fusion_guard=True``'s handler):
    the region report keeps both peaks (``fusion_guard_auto``), one compile in one place."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with torch._inductor.config.patch(fx_graph_cache=False):  # both compiles run Inductor
        opt, loss = _llama_step(
            lambda m: memopt.optimize(m, budget=0.1, fusion_guard="auto", fuse_loss=False)
        )
    state = api._STATES[opt]
    assert len(state.regions) == 1  # compiled again in the same report
    region = state.regions[0]
    sec, tried = region.extra["inductor"], region.extra["fusion_guard_auto"]
    model, off, on = sec["model_peak"], tried["unguarded_peak"], tried["guarded_peak"]
    if compat.TORCH_VERSION >= (2, 13):
        # without the guard Inductor's backward peaks above the model by more than 5% (torch
        # 2.13: 8.6% here, 15% on the zoo's tiny Llama at 4 x 128); with it within 3% (-1.3%),
        # and below the unguarded compile: that compile is kept, its refusals counted
        assert off > 1.05 * model
        assert abs(on - model) <= 0.03 * model and on < off
        assert tried["kept"] and sec["peak"] == on and region.extra["fusions_refused"] > 0
    else:
        # torch 2.11 and 2.12 fuse otherwise here, and the guard does not lower the peak
        # (unguarded over the model by 2.9% on 2.11, 5.3% on 2.12.1; guarded higher still):
        # "auto" tries the guard and keeps the unguarded compile
        assert off > (1 + GUARD_EXCESS) * model and on >= off
        assert not tried["kept"] and sec["peak"] == off and off <= 1.06 * model
    eager, eager_loss = _llama_step()  # the guarded kernels compute what eager does
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-5)
    for a, b in zip(opt.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x.pow(2).mean()


def test_auto_keeps_the_unguarded_compile_when_the_guard_does_not_lower_the_peak(
    monkeypatch, tmp_path, caplog
):
    """A region over its model is compiled again with the guard; when that compile peaks no
    lower, the first compile's report (and planning problem) come back and later compiles
    stay unguarded. A region within GUARD_EXCESS of its model is compiled once."""
    import logging

    from memopt import regions

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(128, 64)

    def run():
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = _Mlp()
        opt = memopt.optimize(model, budget=0.5, fusion_guard="auto")
        opt(x).backward()
        return api._STATES[opt]

    with caplog.at_level(logging.INFO, logger="memopt"):
        state = run()
    assert not [r for r in caplog.records if "with the fusion guard" in r.getMessage()]
    first = state.regions[0]
    sec = first.extra["inductor"]
    assert sec["peak"] <= sec["model_peak"] * (1 + regions.GUARD_EXCESS)
    caplog.clear()
    monkeypatch.setattr(regions, "_over_model", lambda region, assigned=None: True)  # over
    with caplog.at_level(logging.INFO, logger="memopt"):
        state = run()
    said = [r.getMessage() for r in caplog.records if "with the fusion guard" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("not kept")  # no distant fusion to refuse
    region = state.regions[0]
    assert region.extra["fusions_refused"] == 0  # the unguarded compile's report came back
    assert region.extra["inductor"]["peak"] == sec["peak"] and 0 in state.problems
    tried = region.extra["fusion_guard_auto"]
    assert tried["unguarded_peak"] == sec["peak"] and not tried["kept"]
    assert len(state.regions) == 1


def test_the_guarded_compile_does_not_repeat_the_first_compiles_warnings(
    monkeypatch, tmp_path, caplog
):
    """The guard's second compile plans the same graph again: an infeasible budget was said
    twice per region (the third sweep: Gemma, GLM-4, GraniteMoE, PhiMoE); now once."""
    import logging

    from memopt import regions

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(regions, "_over_model", lambda region, assigned=None: True)
    torch._dynamo.reset()
    torch.manual_seed(0)
    opt = memopt.optimize(_Mlp(), budget=0.01, fusion_guard="auto")
    with caplog.at_level(logging.INFO, logger="memopt"):
        opt(torch.randn(128, 64)).backward()
    said = [r.getMessage() for r in caplog.records]
    assert sum("with the fusion guard" in m for m in said) == 1  # compiled twice
    assert sum("is infeasible for this graph" in m for m in said) == 1, said


def test_the_guard_is_a_setting():
    assert resolve_config().fusion_guard is False
    assert resolve_config(fusion_guard=True).fusion_guard is True
    assert resolve_config(fusion_guard="auto").fusion_guard == "auto"
    with pytest.raises(memopt.ConfigError, match="not 0, 1 or 'auto'"):
        resolve_config(fusion_guard="sometimes")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMOPT_FUSION_GUARD", "1")
        assert resolve_config().fusion_guard is True
        assert resolve_config().sources["fusion_guard"] == "env:MEMOPT_FUSION_GUARD"
        mp.setenv("MEMOPT_FUSION_GUARD", "auto")
        assert resolve_config().fusion_guard == "auto"
        mp.setenv("MEMOPT_FUSION_GUARD", "0")  # the user's word wins over a budget's default
        assert resolve_config(budget=0.5).fusion_guard is False


def test_a_budget_guards_by_default():
    """With a budget (a peak to meet) the guard is "auto" unless set: on an H200 it lowered
    or matched memopt's peak and kernel time at each point measured (forty-second session)."""
    for budget in (0.5, 10 * 2**30):
        c = resolve_config(budget=budget)
        assert (c.fusion_guard, c.sources["fusion_guard"]) == ("auto", "default with a budget")
    assert resolve_config(budget=0.5, fusion_guard=False).fusion_guard is False
    assert resolve_config(level=1).fusion_guard is False  # no peak asked for: one compile
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMOPT_BUDGET", "0.3")
        assert resolve_config().fusion_guard == "auto"


def test_a_plan_variant_is_compared_with_its_step_options_peak():
    """A plan variant's report has no prediction of its own: its model is the step option's
    peak (the H200's Mistral variants went 250-580 MB over Inductor's plan unchecked)."""
    from types import SimpleNamespace

    from memopt.regions import _over_model
    from memopt.step import Option

    def region(peak, model=None):
        return SimpleNamespace(extra={"inductor": {"peak": peak, "model_peak": model}})

    option = Option(plans=("BiasGelu+:1:-1",), peak=100_000)
    assert _over_model(region(101_001), option)  # 1.001% over
    assert not _over_model(region(101_000), option)  # GUARD_EXCESS exactly
    assert not _over_model(region(101_001))  # no model without the option
    assert _over_model(region(101_001, model=100_000))  # a first compile's own prediction
    assert not _over_model(region(100_500, model=50_000), option)  # the option's, not its own
    assert not _over_model(region(101_001), Option(plans=()))  # an option without a peak


def test_auto_compares_a_step_plans_variant_and_compiles_it_again(monkeypatch, tmp_path):
    """A one-region step measured over its budget becomes a step plan whose option compiles a
    variant; under ``"auto"`` that compile is checked against the option and, over it,
    compiled again with the guard in the variant's own report."""
    from memopt import regions
    from memopt.api import MemoptBackend
    from memopt.config import resolve_config
    from memopt.state import MemoptState
    from tests.test_step_overrun import BUDGET, _cuda_step, _static

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(4)]
    )
    config = resolve_config(budget=BUDGET, fusion_guard="auto")
    state = MemoptState(config)
    compiled = torch.compile(model, backend=MemoptBackend(config, state))
    x = torch.randn(128, 64)
    compiled(x).sum().backward()
    entry = _static(state) + 1000
    _cuda_step(state, entry)
    _cuda_step(state, entry, probed=int(BUDGET * 1.05))  # over: a step plan
    assert state.step_choice is not None
    seen, over = [], regions._over_model

    def spy(region, assigned=None):
        seen.append(assigned)
        return assigned is not None or over(region, assigned)  # as if the variant were over

    monkeypatch.setattr(regions, "_over_model", spy)
    compiled(x).sum().backward()
    assert len(state.regions) == 2 and [a is None for a in seen] == [False]
    option = seen[0]
    assert option.plans == tuple(state.regions[1].extra["frozen"]["config"])
    tried = state.regions[1].extra["fusion_guard_auto"]
    assert tried["model_peak"] == option.peak and tried["unguarded_peak"] is not None
    assert "fusion_guard_auto" not in state.regions[0].extra  # the first compile was within
