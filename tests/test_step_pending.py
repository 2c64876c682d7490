"""A step plan made for a step whose runs the next step does not repeat (DBRX's first step runs
an expert graph later steps do not, the third sweep): the report says the plan is not this
step's instead of falling back to the regions' own verdicts, and the step after is planned."""

from __future__ import annotations

import torch
import torch.nn as nn

import memopt
from memopt.api import _STATES
from tests.test_step_regions import Block, D  # a block that breaks the graph after it


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(D, 8)
        self.first = True  # the first step runs block 0 twice (as DBRX's expert loop did)

    def forward(self, x):
        b = self.blocks
        if self.first:
            x = b[0](x)
        x = b[2](b[1](b[0](x)))
        return self.head(x).float().pow(2).mean()


def test_a_step_that_ran_other_runs_than_its_plans_says_so_and_is_planned_next():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(32, D)
    opt = memopt.optimize(model, budget=0.5)
    seen, tables = [], []
    for _ in range(3):
        model.zero_grad()
        opt(x).backward()
        model.first = False
        step = memopt.report(opt).step
        seen.append((step.plan_pending, step.feasible, _STATES[opt].step_choice is not None))
        tables.append(memopt.report(opt).table())
    # step 1: no step plan yet (made at its end); step 2: the plan made from step 1, whose
    # first run step 2 replaced (a recompile), so not step 2's verdict; step 3 runs its own
    assert seen == [(False, None, False), (True, None, True), (False, True, True)], seen
    said = ["made for a step whose region runs differ" in t for t in tables]
    assert said == [False, True, False]
    assert "Step plan: predicted step peak" in tables[2]
    assert _STATES[opt].last_step == _STATES[opt]._planned_for or not _STATES[opt]._seq
