"""Plan-string grammar, settings precedence and error messages (no tracing)."""

from __future__ import annotations

import json

import pytest

import memopt
from memopt.config import resolve_config
from memopt.errors import ConfigError, PlanError
from memopt.plan import PlanSpec, Strategy, parse_plan, parse_plans


def test_parse_valid():
    assert parse_plan("BiasGelu+:1:-1") == PlanSpec("BiasGelu+", Strategy.RECOMPUTE, -1)
    assert parse_plan(" Reshape+Where+:2:3 ") == PlanSpec("Reshape+Where+", Strategy.COMPROMISE, 3)
    assert str(parse_plan("Gemm+:2:1")) == "Gemm+:2:1"
    assert parse_plans("A+:1:-1, B+:0:-1,A+:2:1") == (
        PlanSpec("B+", Strategy.KEEP, -1),
        PlanSpec("A+", Strategy.COMPROMISE, 1),
    )


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "BiasGelu+:1",
            "plan 'BiasGelu+:1': expected 3 fields 'ClusterId:Strategy:Count' separated by ':', got 2 field(s)",
        ),
        (":1:-1", "plan ':1:-1': field ClusterId is empty"),
        ("BiasGelu:1:-1", "plan 'BiasGelu:1:-1': field ClusterId 'BiasGelu' is not a cluster id"),
        ("BiasGelu+:x:-1", "plan 'BiasGelu+:x:-1': field Strategy 'x' is not an integer"),
        ("BiasGelu+:7:-1", "plan 'BiasGelu+:7:-1': field Strategy 7 is out of range"),
        ("BiasGelu+:1:0", "plan 'BiasGelu+:1:0': field Count 0 is invalid"),
        ("BiasGelu+:1:-2", "plan 'BiasGelu+:1:-2': field Count -2 is invalid"),
        ("BiasGelu+:1:all", "plan 'BiasGelu+:1:all': field Count 'all' is not an integer"),
    ],
)
def test_bad_plans_name_plan_and_field(text, message):
    with pytest.raises(PlanError) as e:
        parse_plan(text)
    assert str(e.value).startswith(message)
    assert isinstance(e.value, ValueError)


def test_offload_strategy_parses():
    assert parse_plan("MatMul+:3:2") == PlanSpec("MatMul+", Strategy.OFFLOAD, 2)


def test_missing_plus_hint():
    with pytest.raises(PlanError, match=r"cluster ids end with '\+'"):
        parse_plan("BiasGelu:1:-1")


def test_json_plan_file(tmp_path, monkeypatch):
    f = tmp_path / "plans.json"
    f.write_text(json.dumps(["BiasGelu+:1:-1", "Gemm+:0:-1"]))
    monkeypatch.setenv("MEMOPT_CONFIG", str(f))
    cfg = resolve_config()
    assert cfg.plan_strings() == ["BiasGelu+:1:-1", "Gemm+:0:-1"]
    assert cfg.sources["plans"] == "env:MEMOPT_CONFIG"
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    with pytest.raises(PlanError, match="must hold a JSON list of plan strings"):
        parse_plans(str(bad))
    with pytest.raises(PlanError, match="does not exist"):
        parse_plans(str(tmp_path / "missing.json"))


def test_frozen_budget_plan_file_carries_its_sync_dict(tmp_path, monkeypatch):
    # {"config": ..., "sync": ...} is what a budget plan freezes to (Solution.freeze(), or the
    # report's plan_strings and sync): MEMOPT_CONFIG=<that file> re-applies all of it.
    f = tmp_path / "frozen.json"
    plan = {
        "config": ["RMSNorm+:1:-1", "Saved_getitem_9+:3:-1"],
        "sync": {"0": [True, 2, False, 1]},
    }
    f.write_text(json.dumps(plan))
    monkeypatch.setenv("MEMOPT_CONFIG", str(f))
    cfg = resolve_config()
    assert cfg.plan_strings() == ["RMSNorm+:1:-1", "Saved_getitem_9+:3:-1"]
    assert cfg.sync == ((0, (True, 2, False, 1)),)
    assert cfg.sources["sync"] == "plan file (env:MEMOPT_CONFIG)"
    # an explicit sync argument wins; a comma-separated "config" string works too
    f.write_text(json.dumps({**plan, "config": "RMSNorm+:1:-1,Gather+:3:-1"}))
    cfg = resolve_config(sync={1: (True, 3, False, 0)})
    assert cfg.plan_strings() == ["RMSNorm+:1:-1", "Gather+:3:-1"]
    assert cfg.sync == ((1, (True, 3, False, 0)),) and cfg.sources["sync"] == "argument"
    # a bad sync in the file names the file and the entry
    f.write_text(json.dumps({**plan, "sync": {"0": [True, 2]}}))
    with pytest.raises(ConfigError, match=r"plan file .*frozen.json.*sync\[0\]"):
        resolve_config()


def test_arguments_win_over_environment(monkeypatch):
    monkeypatch.setenv("MEMOPT_LEVEL", "2")
    monkeypatch.setenv("MEMOPT_PROBE_LEVEL", "0")
    monkeypatch.setenv("MEMOPT_STRICT", "1")
    cfg = resolve_config(level=1)
    assert (cfg.level, cfg.probe_level, cfg.strict) == (1, 0, True)
    assert cfg.sources["level"] == "argument"
    assert cfg.sources["probe_level"] == "env:MEMOPT_PROBE_LEVEL"
    assert cfg.sources["config" if "config" in cfg.sources else "plans"] == "default"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"level": 5}, "level=5 is out of range; allowed: [0, 1, 2]"),
        ({"probe_level": "x"}, "probe_level='x' is not an integer"),
        ({"budget": "10 parsecs"}, "budget='10 parsecs' is not a budget"),
        ({"budget": 1.5}, "a fractional budget must be in (0, 1]"),
        ({"sync": {0: (True, 1)}}, "sync[0]=(True, 1): expected"),
        ({"bogus": 1}, "unknown memopt setting 'bogus'"),
        ({"config": 123}, "config=123: expected plan strings such as 'BiasGelu+:1:-1'"),
        ({"config": {"config": []}}, "a frozen plan (a dict) goes in as its file's path"),
        ({"config": "plans/frozen"}, "plan file 'plans/frozen' does not exist"),
        ({"offload_layers": "some", "budget": 0.5}, "must be an int >= 0 or 'auto'"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ConfigError) as e:
        resolve_config(**kwargs)
    assert message in str(e.value)


def test_env_level_error_names_variable(monkeypatch):
    monkeypatch.setenv("MEMOPT_LEVEL", "high")
    with pytest.raises(ConfigError, match="MEMOPT_LEVEL='high' is not an integer"):
        resolve_config()


def test_budget_units():
    assert resolve_config(budget="10GiB").budget == 10 * 2**30
    assert resolve_config(budget=0.4).budget == 0.4
    assert resolve_config(budget=123).budget == 123


def test_uuid_encodes_version_and_plan():
    a = resolve_config(config="BiasGelu+:1:-1")
    b = resolve_config(config="BiasGelu+:1:1")
    assert a.uuid() != b.uuid()
    assert a.uuid().startswith(f"memopt-{memopt.__version__}-")
    assert a.uuid() == resolve_config(config=["BiasGelu+:1:-1"]).uuid()


def test_optimize_rejects_non_module():
    with pytest.raises(TypeError, match="expects a torch.nn.Module"):
        memopt.optimize(lambda x: x)


@pytest.mark.parametrize(
    "budget, message",
    [
        ("0GiB", "must be at least one byte"),
        ("-1GiB", "must be at least one byte"),
        ("0.5b", "must be at least one byte"),
        (0, "must be positive"),
        (1.5, "fractional budget must be in"),
        ("lots", "is not a budget"),
    ],
)
def test_bad_budgets_are_named_when_the_config_is_built(budget, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config(budget=budget)
    assert resolve_config(budget="1.5GiB").budget == 3 * 2**29


def test_a_bool_is_not_a_level():
    with pytest.raises(ConfigError, match="level=True is not an integer"):
        resolve_config(level=True)
