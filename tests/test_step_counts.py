"""Plan strings with a Count (``Cluster:Strategy:N``) count occurrences over the training step:
a model that compiles to one region and the same model split into many (graph breaks, one
graph run once per block) apply the plan to the same first N occurrences."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import memopt
from memopt.plan import PlanSpec, Strategy, localize, parse_plans
from tests.test_step_regions import Block, D, H, N, _train

GELU = "BiasGelu+Gelu+"


class Whole(nn.Module):
    """The blocks of tests.test_step_regions without the graph breaks: one region."""

    def __init__(self, broken: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList((Block() if broken else _Unbroken()) for _ in range(N))
        self.head = nn.Linear(D, 8)

    def forward(self, x):
        b = self.blocks
        x = b[3](b[2](b[1](b[0](x))))
        return self.head(x).float().pow(2).mean()


class _Unbroken(Block):
    def forward(self, x):
        return (x + self.down(torch.nn.functional.gelu(self.up(x)))) * 1.0


def _model(broken: bool) -> Whole:
    torch.manual_seed(0)
    return Whole(broken)


def _run(broken: bool, **kw):
    model = _model(broken)
    opt = memopt.optimize(model, **kw)
    grads, measured = _train(opt, model)
    return grads, measured, memopt.report(opt)


_KEEP: dict[bool, int] = {}


def _keep(broken: bool) -> int:
    """The bytes ``_run(broken)`` (no plan) measures saved, trained once per split for the
    module: each test that compares against them builds the same seeded model."""
    if broken not in _KEEP:
        _KEEP[broken] = _run(broken)[1]
    return _KEEP[broken]


def test_localize_counts_what_earlier_runs_left():
    plans = parse_plans(["A+:1:3", "B+:1:-1", "C+:2:1"])
    assert localize(plans, {}) == plans
    assert localize(plans, {"A+": 1, "B+": 5, "C+": 1}) == (
        PlanSpec("A+", Strategy.RECOMPUTE, 2),
        PlanSpec("B+", Strategy.RECOMPUTE, -1),
        PlanSpec("C+", Strategy.KEEP, -1),
    )
    assert localize(plans, {"A+": 7})[0] == PlanSpec("A+", Strategy.KEEP, -1)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_count_means_the_first_n_of_the_step_in_one_region_or_many(count):
    plan = f"{GELU}:1:{count}"
    grads1, one, rep1 = _run(False, config=plan)
    gradsn, many, repn = _run(True, config=plan)
    keep_one, keep_many = _keep(False), _keep(True)
    for a, b in zip(gradsn, grads1):
        torch.testing.assert_close(a, b)
    # each recomputed gelu output (32, H) fp32 is one tensor less saved, whatever the split;
    # per region the first block's region and the shared graph of blocks 1-3 would each
    # recompute their own first `count` (1 + min(count, 3) blocks)
    gelu = 32 * H * 4
    assert keep_one - one == count * gelu
    assert keep_many - many == count * gelu
    # the report says so: the step's saving equals the measured one
    before, after = repn.saved_bytes()
    assert (before, after) == (keep_many, many)
    # one plan file for the step: the user's string, not the runs' local counts
    assert repn.frozen_plan()["config"] == [plan]


def test_a_frozen_counted_plan_reproduces_the_step(tmp_path):
    _, many, rep = _run(True, config=f"{GELU}:1:2")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(rep.frozen_plan()))
    _, again, rep2 = _run(True, config=str(path))
    assert again == many
    assert rep2.saved_bytes() == rep.saved_bytes()


def test_counts_are_per_step_on_every_step():
    """Runs of a later step start counting from zero again (no drift across steps)."""
    model = _model(True)
    opt = memopt.optimize(model, config=f"{GELU}:1:1")
    for _ in range(2):
        _, measured = _train(opt, model, steps=2)
    keep = _keep(True)
    assert keep - measured == 32 * H * 4


def test_a_short_id_counts_over_the_step_too():
    """A Count given with the short id (memopt.format.shorten_ids) counts the same occurrences
    of the full id's cluster across the step's runs, and the plan file keeps the user's string."""
    from memopt.format import shorten_ids

    short = shorten_ids([GELU], width=10)[0][GELU]
    assert short != GELU
    plan = f"{short}:1:2"
    _, many, rep = _run(True, config=plan)
    assert _keep(True) - many == 2 * 32 * H * 4
    assert rep.frozen_plan()["config"] == [plan]
