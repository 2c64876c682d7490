"""memopt.optimize(model, budget=...): the planner's plan is applied, measured and reported."""

from __future__ import annotations

import logging

import torch

import memopt
from tests.helpers import compare, run_step, tiny_llama


def test_fractional_budget_on_llama_saves_what_it_predicts():
    torch.manual_seed(0)
    model = tiny_llama(num_hidden_layers=4)
    ids = torch.randint(1, 128, (4, 32))
    rep, before, after, _ = compare(model, {"input_ids": ids, "labels": ids}, budget=0.5)
    pred_before, pred_after = rep.saved_bytes()
    assert before - after == pred_before - pred_after > 0
    planner = rep.regions[0].extra["planner"]
    assert planner["feasible"]
    assert planner["plan_strings"] and all(":" in s for s in planner["plan_strings"])
    assert "Budget planner: budget" in rep.table()
    # the frozen plan reproduces the same decisions without the solver
    torch._dynamo.reset()
    frozen = memopt.optimize(model, config=planner["plan_strings"])
    _, _, a2 = run_step(model, frozen, {"input_ids": ids, "labels": ids})
    assert a2 == after


def test_infeasible_budget_warns_with_smallest_peak(caplog):
    torch.manual_seed(0)
    model = tiny_llama(num_hidden_layers=2)
    ids = torch.randint(1, 128, (2, 16))
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt = memopt.optimize(model, budget=1000)  # 1000 bytes of peak: impossible
        opt(input_ids=ids, labels=ids).loss.backward()
    msgs = [r.getMessage() for r in caplog.records]
    assert any(
        "is infeasible for this graph; the smallest feasible predicted peak is" in m for m in msgs
    )
    assert not memopt.report(opt).regions[0].extra["planner"]["feasible"]
