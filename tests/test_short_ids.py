"""Short cluster ids in plan strings: the form the report's table and the log lines print
(``Mul+…+Sin+#1a2b``, or typed with ``...``) names the full id it was made from."""

from __future__ import annotations

import itertools

import pytest
import torch

import memopt
from memopt.errors import PlanError
from memopt.format import short_id_matches, short_plan_strings, shorten_ids
from memopt.plan import PlanSpec, Strategy, expand_short_ids, parse_plan, parse_plans

LONG = "Mul+Add+Gelu+Mul+Sub+Tanh+Sigmoid+Mul+Add+Sin+"


def _short(cid: str, width: int = 40) -> str:
    return shorten_ids([cid], width=width)[0][cid]


def test_every_short_form_names_its_id_and_no_other():
    other = LONG.replace("Sin+", "Cos+")
    for width in (14, 20, 30, 40):
        short = _short(LONG, width)
        assert short != LONG and short_id_matches(short, LONG)
        assert not short_id_matches(short, other)
        assert short_id_matches(short.replace("…", "..."), LONG)  # typed without the ellipsis
    assert _short(LONG) == "Mul+…+Sin+#" + _short(LONG).split("#")[1]
    assert not short_id_matches("Mul+Add+", LONG)  # a full id is no short form
    assert not short_id_matches("Add+…+Sin+#" + _short(LONG).split("#")[1], LONG)  # head


def test_plan_strings_take_the_short_form_and_expand_it():
    short = _short(LONG)
    spec = parse_plan(f"{short}:1:2")
    assert spec == PlanSpec(short, Strategy.RECOMPUTE, 2)
    got = expand_short_ids([spec, PlanSpec("Gemm+", Strategy.KEEP, -1)], [LONG, "Gemm+"])
    assert got == (PlanSpec(LONG, Strategy.RECOMPUTE, 2), PlanSpec("Gemm+", Strategy.KEEP, -1))
    # one naming no known id stays as written (decide calls it unknown)
    assert expand_short_ids([spec], ["Gemm+"]) == (spec,)
    # the short and the full form of one id: the later plan wins, as for two full ids
    both = parse_plans([f"{LONG}:1:-1", f"{short}:0:-1"])
    assert expand_short_ids(both, [LONG]) == (PlanSpec(LONG, Strategy.KEEP, -1),)
    with pytest.raises(PlanError, match="short id"):
        parse_plan("Mul+…+Sin+#xyz1:1:-1")  # not hex: neither form


def test_a_short_id_naming_two_clusters_is_an_error_that_lists_them():
    by_tag: dict[str, str] = {}
    for i in itertools.count():  # two ids with one 4-digit hash: a birthday search
        cid = f"Mul+Add{i}+Sub+Sin+"
        short = _short(cid, 15)
        tag = short.split("#")[1]
        if tag in by_tag:
            break
        by_tag[tag] = cid
    with pytest.raises(PlanError, match=r"names 2 clusters .*more hash digits"):
        expand_short_ids([PlanSpec(short, Strategy.RECOMPUTE, -1)], [cid, by_tag[tag]])
    # the table prints both with more digits: each names its own cluster
    mapping, _ = shorten_ids([cid, by_tag[tag]], width=15)
    assert all(len(s.split("#")[1]) > 4 for s in mapping.values())
    for full, short in mapping.items():
        plan = PlanSpec(short, Strategy.RECOMPUTE, -1)
        assert expand_short_ids([plan], mapping) == (PlanSpec(full, Strategy.RECOMPUTE, -1),)


def test_log_lines_print_short_plan_strings():
    short = _short(LONG)
    assert short_plan_strings([f"{LONG}:1:-1", "Gemm+:1:3"]) == [f"{short}:1:-1", "Gemm+:1:3"]


class _Chain(torch.nn.Module):
    """One cluster of ten elementwise ops between two linears: its id is 46 characters."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x) * 1.5 + 0.25)
        h = (
            (h.transpose(0, 1).reshape(64, -1).transpose(0, 1) * 0.5 - 0.1).tanh().sigmoid() * 2 + 1
        ).sin()
        return self.b(h).sum()


def _applied(config: str) -> tuple[dict[str, bool], str]:
    torch.manual_seed(0)
    model, x = _Chain(), torch.randn(64, 64)
    fn = memopt.optimize(model, level=0, config=config)
    fn(x).backward()
    rep = memopt.report(fn)
    return {c["cluster_id"]: c["enabled"] for r in rep.regions for c in r.clusters}, rep.table()


def test_a_short_id_applies_the_plan_of_its_cluster():
    torch._dynamo.reset()
    full, _ = _applied(f"{LONG}:1:-1")
    assert full == {"Gemm+": False, LONG: True}
    for short in (_short(LONG), _short(LONG).replace("…", "...")):
        torch._dynamo.reset()
        assert _applied(f"{short}:1:-1")[0] == full
    # one naming no cluster is reported as unknown, with the id its hash tag names
    torch._dynamo.reset()
    wrong = "Mul+…+Cos+#" + _short(LONG).split("#")[1]
    clusters, table = _applied(f"{wrong}:1:-1")
    assert clusters == {"Gemm+": False, LONG: False}
    assert f"unknown cluster id {wrong!r}; did you mean {LONG}?" in table, table
