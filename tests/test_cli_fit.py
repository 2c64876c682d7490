"""memopt fit on a tiny GPT-2: the largest batch per strategy, checked against the peak
expression it reports."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from memopt.cli.extrapolate import evaluate
from memopt.cli.main import main

TINY_GPT2 = ["n_embd=64", "n_layer=2", "n_head=4", "vocab_size=128", "n_positions=64"]
#: small enough that the searches stay short (the planner row re-plans at every size tried:
#: largest batch 23, seq 191 here), large enough that every row fits more than one
MEMORY = 12 * 2**20


def _cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def fit() -> dict:
    code, out = _cli(
        ["fit", "hf:gpt2", "--config", *TINY_GPT2, "--seq", "64", "--memory", "12MiB"]
        + ["--device-kind", "cpu", "--dtype", "fp32", "--json"]
    )
    assert code == 0
    return json.loads(out)


def test_largest_batch_is_the_last_that_fits(fit):
    assert fit["memory"] == MEMORY and fit["solve_for"] == "batch"
    rows = {r["strategy"]: r for r in fit["rows"]}
    assert list(rows) == ["none (level 0)", "level 1", "planner"]
    for name in ("none (level 0)", "level 1"):
        r = rows[name]
        n = r["largest"]
        assert n >= 1, r
        assert evaluate(r["peak_symbolic"], {"batch": n, "seq": 64}) == r["peak_bytes"] <= MEMORY
        assert evaluate(r["peak_symbolic"], {"batch": n + 1, "seq": 64}) > MEMORY
    assert rows["level 1"]["largest"] >= rows["none (level 0)"]["largest"]


def test_planner_row_plans_per_batch(fit):
    r = fit["rows"][2]
    assert isinstance(r["largest"], int) and r["largest"] >= 1
    assert r["peak_bytes"] <= MEMORY


def test_fit_text_table():
    code, out = _cli(
        ["fit", "hf:gpt2", "--config", *TINY_GPT2, "--batch", "4", "--memory", "12MiB"]
        + ["--solve-for", "seq", "--device-kind", "cpu", "--dtype", "fp32", "--depth", "full"]
    )
    assert code == 0
    assert "Largest seq whose predicted peak fits 12.00 MiB (batch 4):" in out
    for strategy in ("none (level 0)", "level 1", "planner"):
        assert strategy in out


def test_solving_for_a_size_the_factory_does_not_take_is_an_error_before_tracing():
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["fit", "tests.test_cli_plan:gram", "--solve-for", "seq", "--memory", "1GiB"])
    assert code == 2
    assert "--solve-for seq: factory tests.test_cli_plan:gram has no seq= parameter" in (
        err.getvalue()
    )
