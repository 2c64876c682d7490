"""docs/architecture.md is written from the runner's pass table: every pass is in it."""

import os
import re

import pytest

from memopt.config import resolve_config
from memopt.errors import ConfigError
from memopt.passes.pipeline import PASS_NAMES, PASSES, check_disabled

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "architecture.md")


def test_every_pass_is_in_the_architecture_doc():
    text = open(DOC).read()
    rows = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.M)
    assert rows == list(PASS_NAMES)  # the same passes, in the runner's order
    assert len(PASSES) == len(set(PASS_NAMES))


def test_passes_switch_off_by_name(monkeypatch):
    assert resolve_config(disable_passes=["offload"]).disable_passes == ("offload",)
    monkeypatch.setenv("MEMOPT_DISABLE_PASSES", "offload, apply_recompute")
    cfg = resolve_config()
    assert cfg.disable_passes == ("apply_recompute", "offload")
    assert cfg.sources["disable_passes"] == "env:MEMOPT_DISABLE_PASSES"
    with pytest.raises(ConfigError, match="unknown pass name.*ofload.*the passes are"):
        resolve_config(disable_passes="ofload")
    with pytest.raises(ConfigError, match="decide cannot be switched off"):
        check_disabled(["decide"])


def test_a_disabled_rewrite_leaves_the_plan_unapplied():
    import torch

    import memopt
    from tests.helpers import MLP, run_step

    torch.manual_seed(0)
    model, x = MLP(d=64, h=256, n=2), torch.randn(8, 64)
    # tests/helpers.py:compare's checks, with one plain torch.compile for both settings
    torch._dynamo.reset()
    l0, g0, plain = run_step(model, torch.compile(model), {"x": x}, lambda o: o.sum())
    measured, reports = [], []
    for disable in ((), ("apply_recompute",)):
        torch._dynamo.reset()
        opt = memopt.optimize(model, config="BiasGelu+:1:-1", disable_passes=list(disable))
        l1, g1, b1 = run_step(model, opt, {"x": x}, lambda o: o.sum())
        torch.testing.assert_close(l1, l0)
        assert g0.keys() == g1.keys()
        for k in g0:
            torch.testing.assert_close(g1[k], g0[k], msg=lambda m, k=k: f"grad {k}: {m}")
        measured.append(b1)
        reports.append(memopt.report(opt))
    on, off = measured
    assert plain - on == 2 * 8 * 256 * 4  # measured: the gelu outputs are recomputed
    assert reports[0].frozen_plan() == {"config": ["BiasGelu+:1:-1"], "sync": {}}
    assert off == plain  # measured: nothing changed with the rewrite off


def test_a_typo_in_optimize_names_the_setting():
    import torch

    import memopt

    with pytest.raises(ConfigError, match="unknown keyword argument.*levle.*did you mean 'level'"):
        memopt.optimize(torch.nn.Linear(2, 2), levle=1)


def test_the_compiled_module_keeps_the_models_forward_signature():
    import inspect

    import memopt
    from tests.helpers import tiny_llama

    opt = memopt.optimize(tiny_llama())
    params = inspect.signature(opt.forward).parameters
    assert "input_ids" in params and "labels" in params  # what the HF Trainer reads
