"""Unknown cluster ids, strict mode, and warm compile caches."""

from __future__ import annotations

import logging

import pytest
import torch

import memopt
from memopt.errors import PlanError
from tests.helpers import MLP, run_step, warm_compile_caches


def test_unknown_cluster_warns_with_close_matches(caplog):
    torch.manual_seed(0)
    model = MLP(n=1)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt = memopt.optimize(model, config="BiasGelo+:1:-1")
        opt(torch.randn(2, 64)).sum().backward()
    msgs = [r.getMessage() for r in caplog.records]
    assert any("unknown cluster id 'BiasGelo+'; did you mean BiasGelu+" in m for m in msgs), msgs
    assert any("Available cluster ids:" in m for m in msgs)
    assert "Warning: plan 'BiasGelo+:1:-1': unknown cluster id" in memopt.report(opt).table()


def test_unknown_cluster_strict_raises(monkeypatch):
    monkeypatch.setenv("MEMOPT_STRICT", "1")
    model = MLP(n=1)
    opt = memopt.optimize(model, config="Nope+:1:-1")
    # known only when the graph compiles: memopt's own error comes out of the call, not
    # dynamo's BackendCompilerFailed around it
    with pytest.raises(memopt.ConfigError, match=r"unknown cluster id 'Nope\+'") as e:
        opt(torch.randn(2, 64))
    assert isinstance(e.value, PlanError) and e.value.__cause__ is None


def test_unsupported_strategy_for_cluster_warns(caplog):
    model = MLP(n=1)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt = memopt.optimize(model, config="BiasGelu+:2:-1")
        opt(torch.randn(2, 64)).sum().backward()
    assert any("does not support strategy 2" in r.getMessage() for r in caplog.records)


def test_warm_cache_keeps_plan_and_report(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = MLP(n=2)
    x = torch.randn(4, 64)
    results = []
    with warm_compile_caches(tmp_path, monkeypatch):
        for cfg in ("BiasGelu+:1:-1", "BiasGelu+:1:-1", None):
            torch._dynamo.reset()
            opt = memopt.optimize(model, config=cfg)
            _, _, nbytes = run_step(model, opt, {"x": x}, lambda o: o.sum())
            results.append((nbytes, memopt.report(opt)))
    (b1, r1), (b2, r2), (b3, r3) = results
    assert b1 == b2 and b3 - b1 == 2 * 4 * 256 * 4  # plan applied on the hit; other uuid: no plan
    assert not r1.regions[0].from_cache and r2.regions[0].from_cache
    assert r2.to_dict()["plans"] == r1.to_dict()["plans"]
    assert not r3.enabled


def test_warm_cache_repeats_the_warnings(tmp_path, monkeypatch, caplog):
    """A compile-cache hit skips the partitioner; a wrong plan string still warns."""
    torch.manual_seed(0)
    model = MLP(n=1)
    x = torch.randn(4, 64)
    said = []
    with warm_compile_caches(tmp_path, monkeypatch):
        for _ in range(2):
            torch._dynamo.reset()
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="memopt"):
                opt = memopt.optimize(model, config="BiasGelo+:1:-1")
                opt(x).sum().backward()
            said.append([r.getMessage() for r in caplog.records])
            hit = memopt.report(opt).regions[0].from_cache
    assert hit  # the second run was a cache hit
    for msgs in said:
        assert any("unknown cluster id 'BiasGelo+'" in m for m in msgs), msgs
