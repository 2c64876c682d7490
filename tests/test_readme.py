"""README's first-hour path runs as written: its train.py block trains, prints the plan table
and writes plan.json; the frozen plan re-applies with the same bytes; its memopt plan command
draws the picture."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
import torch

import memopt
from memopt.__main__ import main as memopt_main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _block(after: str, lang: str) -> str:
    start = README.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert m is not None
    return m.group(1)


def test_first_hour_train_script_table_frozen_plan_and_picture(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    scope: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        exec(_block("<!-- first hour", "python"), scope)
    text = out.getvalue()
    assert text.splitlines()[5].startswith("Memory Optimizer : ON : Level 1")
    frozen = json.loads((tmp_path / "plan.json").read_text())
    assert frozen["config"] and frozen["sync"] == {}
    trained = memopt.report(scope["model"]).saved_bytes()

    # the frozen plan, applied from the file to a fresh model, saves the same bytes
    torch._dynamo.reset()
    again = memopt.optimize(
        scope["AutoModelForCausalLM"].from_config(scope["config"]), config="plan.json"
    )
    ids = torch.randint(0, 1000, (4, 64))
    again(input_ids=ids, labels=ids).loss.backward()
    assert memopt.report(again).saved_bytes() == trained

    command = next(
        line for line in _block("<!-- first hour", "bash").splitlines() if "--plot" in line
    )
    argv = shlex.split(command)
    assert argv[0] == "memopt"
    with contextlib.redirect_stdout(io.StringIO()):
        assert memopt_main(argv[1:]) == 0
    assert (tmp_path / "step.png").stat().st_size > 10_000
