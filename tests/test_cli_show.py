"""memopt plan --save / --save-report / --timeline, memopt show, and errors that say what to do."""

from __future__ import annotations

import json

import pytest

from memopt.cli.errors import EXIT_USAGE
from memopt.cli.main import main
from memopt.cli.show import render, report_from_dict

MLP = ["plan", "tests.test_cli_plan:mlp", "--batch", "3", "--seq", "10", "--device-kind", "cpu"]
GELU_BYTES = 512 * 3 * 10  # the GELU output: fp32 x 128 features x batch x seq


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("saved")
    plan, report = d / "plan.json", d / "report.json"
    argv = [*MLP, "--config", "BiasGelu+:1:-1", "--timeline"]
    code = main([*argv, "--save", str(plan), "--save-report", str(report)])
    assert code == 0
    return json.loads(plan.read_text()), json.loads(report.read_text())


def test_save_writes_the_frozen_plan(saved):
    plan, _ = saved
    assert plan == {"config": ["BiasGelu+:1:-1"], "sync": {}}


def test_timeline_frees_the_gelu_output_between_forward_and_backward(saved):
    t = saved[1]["timeline"]
    gap = [b - p for b, p in zip(t["baseline"], t["planned"])]
    assert len(gap) == t["positions"] and t["n_fwd"] < t["positions"]
    assert max(gap) == GELU_BYTES and min(gap) == 0
    assert t["decisions"] == {"mul_16": 1}  # one candidate, recomputed
    # freed between its last forward use and its first backward use
    freed = [i for i, g in enumerate(gap) if g]
    run = [i for i in freed if gap[i] == GELU_BYTES]
    assert run == list(range(run[0], run[-1] + 1))
    assert run[0] < t["n_fwd"] <= run[-1]
    # and where Inductor recomputes it, inside the GELU backward's kernel (the two fuse): the
    # GELU output is made there, the second linear's weight gradient (128 x 32 fp32, read from
    # it) only after, so that position holds 1,024 B less than keeping it
    assert [(i, gap[i]) for i in freed if i not in run] == [(34, 128 * 32 * 4 - GELU_BYTES)]


def test_show_prints_the_saved_report(saved, tmp_path, capsys):
    _, doc = saved
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("memopt plan tests.test_cli_plan:mlp: Sequential, 8,352 parameters")
    assert "- Plan 1 : ON  : BiasGelu+:1:-1" in out
    assert "512*batch*seq" in out and "Predicted peak of one training step" in out
    assert render(doc).endswith(out.strip().splitlines()[-1])


def test_show_reads_a_bare_report_and_freezes_it(saved, tmp_path, capsys):
    report = saved[1]["report"]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(report))
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Memory Optimizer : ON : Level 0, User config: BiasGelu+:1:-1")
    assert report_from_dict(report).to_dict()["plans"] == report["plans"]
    assert main(["show", str(path), "--frozen"]) == 0
    assert json.loads(capsys.readouterr().out) == {"config": ["BiasGelu+:1:-1"], "sync": {}}


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"level": 0}', "not a memopt report: no config, probe_level, regions"),
    ],
)
def test_show_errors_say_what_is_wrong(content, needle, tmp_path, capsys):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    assert main(["show", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("memopt show: error: ") and needle in err


def test_model_after_an_option_says_put_model_first(capsys):
    assert main(["plan", "--config", "n_layer=2", "hf:gpt2"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        "put MODEL before --config (--config takes the words after it): "
        "memopt plan hf:gpt2 --config n_layer=2" in err
    )


def test_save_to_a_missing_directory_is_one_line(tmp_path, capsys):
    code = main([*MLP, "--save", str(tmp_path / "no" / "plan.json")])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("memopt plan: error: --save: cannot write") and "\n" not in err
