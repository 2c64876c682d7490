"""The budget planner's plan is the plan decide applies, on a real compile: the tiny Llama at
budget 0.1 (its attention's recompute saves its RNG state, so its saving is less than its
bytes), with no warning from ``plan_budget._check_applied`` either way."""

from __future__ import annotations

import logging

import torch

import memopt
from memopt import api
from tests.helpers import tiny_llama


def test_the_tiny_llamas_plan_at_budget_0_1_is_applied_as_solved(caplog):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny_llama()
    ids = torch.randint(1, 128, (4, 64))
    opt = memopt.optimize(model, budget=0.1)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt(input_ids=ids, labels=ids).loss.backward()
    state = api._STATES[opt]
    cands = state.problems[0].problem.candidates
    seeded = [c for c in cands if c.recompute_kept_bytes]
    assert seeded and all(c.cluster_id == "Attention+" for c in seeded)
    assert all(0 < c.recompute_kept_bytes < c.nbytes for c in seeded)
    said = [r.getMessage() for r in caplog.records if "memopt budget: decide" in r.getMessage()]
    assert said == []  # before: "decide keeps 7 tensor(s) the plan recomputes (embedding, ...)"
