"""End-to-end: plans change what is saved by exactly the bytes the report claims, and
gradients stay equal to plain torch.compile."""

from __future__ import annotations

import logging

import pytest
import torch

import memopt
from tests.helpers import MLP, compare, run_step, tiny_bert, tiny_gpt2, tiny_llama


def _row(report, cid):
    rows = [c for c in report.to_dict()["plans"] if c["cluster_id"] == cid]
    assert rows, f"no cluster {cid}; have {[c['cluster_id'] for c in report.to_dict()['plans']]}"
    return rows[0]


def test_biasgelu_plan_on_linear_gelu_mlp_saves_exact_bytes():
    torch.manual_seed(0)
    model = MLP(d=64, h=256, n=2)
    x = torch.randn(8, 64)
    rep, before, after, _ = compare(
        model, {"x": x}, loss_fn=lambda out: out.sum(), config="BiasGelu+:1:-1"
    )
    row = _row(rep, "BiasGelu+")
    assert row["enabled"] and row["freq"] == 2 and row["strategy"] == 1 and row["count"] == -1
    # gelu output: 8 x 256 fp32 per block, 2 blocks
    assert row["saving_bytes"] == 2 * 8 * 256 * 4
    assert before - after == row["saving_bytes"]
    b, a = rep.saved_bytes()
    assert (b, a) == (before, after)
    assert "Plan 1 : ON  : BiasGelu+:1:-1" in rep.table()


def test_env_config_enables_plan(monkeypatch):
    monkeypatch.setenv("MEMOPT_CONFIG", "BiasGelu+:1:1")
    torch.manual_seed(0)
    model = MLP(n=2)
    rep, before, after, _ = compare(model, {"x": torch.randn(4, 64)}, loss_fn=lambda o: o.sum())
    row = _row(rep, "BiasGelu+")
    assert row["enabled"] and row["count"] == 1
    assert row["saving_bytes"] == 4 * 256 * 4  # only the first occurrence
    assert before - after == row["saving_bytes"]
    assert rep.to_dict()["sources"]["plans"] == "env:MEMOPT_CONFIG"
    assert "config=env:MEMOPT_CONFIG" in rep.table()


def test_dynamic_shapes_expression_matches_measured_at_two_batch_sizes():
    torch.manual_seed(0)
    model = MLP(d=32, h=128, n=2)
    torch._dynamo.reset()
    base = torch.compile(model, dynamic=True)
    opt = memopt.optimize(model, config="BiasGelu+:1:-1", dynamic=True)
    for batch in (3, 10):
        x = torch.randn(batch, 32)
        _, _, b0 = run_step(model, base, {"x": x}, lambda o: o.sum())
        _, _, b1 = run_step(model, opt, {"x": x}, lambda o: o.sum())
        row = _row(memopt.report(opt), "BiasGelu+")
        assert row["saving_symbolic"] == "1024*inputs_x_dim0"
        assert b0 - b1 == 1024 * batch
    assert len(memopt.report(opt).regions) == 1  # one compile served both sizes


def test_level1_recomputes_and_keeps_gradients():
    torch.manual_seed(0)
    model = MLP(n=3)
    rep, before, after, _ = compare(model, {"x": torch.randn(5, 64)}, lambda o: o.sum(), level=1)
    d = rep.to_dict()
    assert d["level"] == 1 and d["enabled"]
    assert all(p["enabled"] for p in d["plans"] if 1 in p["available"])
    assert after < before
    assert rep.saved_bytes() == (before, after)


@pytest.mark.parametrize("factory", [tiny_gpt2, tiny_bert], ids=["gpt2", "bert"])
def test_biasgelu_on_hf_models(factory):
    torch.manual_seed(0)
    model = factory()
    ids = torch.randint(1, 128, (2, 16))
    rep, before, after, _ = compare(
        model, {"input_ids": ids, "labels": ids}, config="BiasGelu+:1:-1"
    )
    row = _row(rep, "BiasGelu+")
    assert row["enabled"] and row["freq"] == 2
    assert row["saving_bytes"] == 2 * 2 * 16 * 256 * 4
    assert before - after == row["saving_bytes"]


def test_hf_gpt2_dynamic_symbolic_names():
    # one block: the symbolic names and sizes are the point, not the depth (two compiles with
    # dynamic shapes, whose symbolic tracing costs grow with every block)
    torch.manual_seed(0)
    model = tiny_gpt2(n_layer=1)
    torch._dynamo.reset()
    base = torch.compile(model, dynamic=True)
    opt = memopt.optimize(model, config="BiasGelu+:1:-1", dynamic=True)
    for b, s in ((2, 16), (3, 24)):
        ids = torch.randint(1, 128, (b, s))
        _, _, b0 = run_step(model, base, {"input_ids": ids, "labels": ids})
        _, g1, b1 = run_step(model, opt, {"input_ids": ids, "labels": ids})
        row = _row(memopt.report(opt), "BiasGelu+")
        # the GELU output of the one block: 4 * n_embd fp32 per token
        assert row["freq"] == 1
        assert row["saving_symbolic"] == "1024*inputs_input_ids_dim0*inputs_input_ids_dim1"
        assert b0 - b1 == 1024 * b * s
        assert row["saving_bytes"] == 1024 * b * s  # at the latest call's sizes
    d = memopt.report(opt).to_dict()
    assert d["sizes_from"] == "the latest call"
    assert (
        d["symbols"]["inputs_input_ids_dim0"] == 3 and d["symbols"]["inputs_input_ids_dim1"] == 24
    )


def test_llama_swiglu_level1_grads_match():
    torch.manual_seed(0)
    model = tiny_llama(num_hidden_layers=1)  # the clusters' kinds are the point, not the depth
    ids = torch.randint(1, 128, (2, 16))
    rep, before, after, _ = compare(model, {"input_ids": ids, "labels": ids}, level=1)
    ids_ = {p["cluster_id"] for p in rep.to_dict()["plans"]}
    assert any("Silu" in c for c in ids_), ids_
    assert any("RMSNorm" in c for c in ids_), ids_
    assert after < before
    assert rep.saved_bytes() == (before, after) or before - after == (
        rep.saved_bytes()[0] - rep.saved_bytes()[1]
    )


def test_graph_break_regions_and_training():
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = MLP(n=1)
            self.b = MLP(n=1)

        def forward(self, x):
            y = self.a(x)
            torch._dynamo.graph_break()
            return self.b(y)

    torch.manual_seed(0)
    model = Broken()
    rep, before, after, _ = compare(
        model, {"x": torch.randn(4, 64)}, lambda o: o.sum(), config="BiasGelu+:1:-1"
    )
    d = rep.to_dict()
    assert len(d["regions"]) == 2
    assert _row(rep, "BiasGelu+")["freq"] == 2
    assert before - after == _row(rep, "BiasGelu+")["saving_bytes"]


def test_dropout_is_excluded_and_reported():
    class Drop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(32, 64)
            self.drop = torch.nn.Dropout(0.5)
            self.fc2 = torch.nn.Linear(64, 32)

        def forward(self, x):
            return self.fc2(self.drop(torch.relu(self.fc1(x))))

    torch.manual_seed(0)
    model = Drop()
    torch._dynamo.reset()
    opt = memopt.optimize(model, level=1)
    opt(torch.randn(4, 32)).sum().backward()
    rep = memopt.report(opt)
    excluded = [e for r in rep.regions for e in r.excluded]
    assert any("random op" in e["reason"] for e in excluded), excluded
    assert "random op" in rep.table()
    drop = [c for c in rep.to_dict()["plans"] if "Dropout" in c["cluster_id"]]
    assert drop and "saved mask" in rep.table()
    for c in rep.regions[0].clusters:
        if "Dropout" in c["cluster_id"]:
            assert c["note"] == "recomputes dropout from its saved mask (same random numbers)"


def test_dropout_training_grads_match_plain_compile():
    class Drop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(32, 64)
            self.drop = torch.nn.Dropout(0.3)
            self.fc2 = torch.nn.Linear(64, 32)

        def forward(self, x):
            return self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(x))))

    torch.manual_seed(0)
    model = Drop()
    x = torch.randn(16, 32)
    grads = []
    for make in (lambda: torch.compile(model), lambda: memopt.optimize(model, level=1)):
        torch._dynamo.reset()
        compiled = make()
        torch.manual_seed(123)
        model.zero_grad()
        compiled(x).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert memopt.report(compiled).enabled
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_report_logged_at_first_compile(caplog):
    torch.manual_seed(0)
    model = MLP(n=1)
    with caplog.at_level(logging.INFO, logger="memopt"):
        opt = memopt.optimize(model, config="BiasGelu+:1:-1")
        opt(torch.randn(2, 64)).sum().backward()
    assert any("Plan 1 : ON  : BiasGelu+:1:-1" in r.getMessage() for r in caplog.records)


def test_backend_string(monkeypatch):
    monkeypatch.setenv("MEMOPT_CONFIG", "BiasGelu+:1:-1")
    torch.manual_seed(0)
    model = MLP(n=1)
    c = torch.compile(model, backend="memopt")
    c(torch.randn(2, 64)).sum().backward()
    row = _row(memopt.report(c), "BiasGelu+")
    assert row["enabled"]
