"""memopt plan/fit fail with one clear line and a non-zero exit code, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from memopt.cli.errors import EXIT_MODEL, EXIT_TRACE, EXIT_USAGE
from memopt.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Branchy(nn.Module):
    """A size that depends on values, with no stand-in (``memopt.cli.eager``), in eager code
    before any compiled region: fake tensors have shapes but no values."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        rows = torch.repeat_interleave(x, (x[:, 0] > 0).long(), dim=0)
        return self.fc(rows).sum()


def branchy(batch: int = 4):
    return Branchy(), {"x": torch.randn(batch, 16)}


def raises():
    raise RuntimeError("no weights here")


def not_a_pair():
    return nn.Linear(2, 2)


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str, cmd: str = "plan") -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"memopt {cmd}: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "argv, code, needle",
    [
        (["plan", "hf:lama"], EXIT_MODEL, "unknown Hugging Face model type 'lama'; did you mean"),
        (["plan", "no_such_module.sub:factory"], EXIT_MODEL, "cannot import 'no_such_module.sub'"),
        (["plan", "tests.test_cli_errors:nope"], EXIT_MODEL, "has no attribute 'nope'"),
        (
            ["plan", "tests.test_cli_errors:raises"],
            EXIT_MODEL,
            "raised RuntimeError: no weights here",
        ),
        (["plan", "tests.test_cli_errors:not_a_pair"], EXIT_MODEL, "expected (model, inputs)"),
        (["plan", "hf:gpt2", "--config", "n_layr=2"], EXIT_USAGE, "no field 'n_layr'"),
        (["plan", "hf:gpt2", "--config", "BiasGelu+:7:-1"], EXIT_USAGE, "field Strategy 7"),
        (["fit", "hf:gpt2", "--memory", "lots"], EXIT_USAGE, "--memory='lots' is not a budget"),
        (["plan", "llama"], EXIT_USAGE, "use hf:TYPE"),
        (["plan", "hf:gpt2", "--batch", "0"], EXIT_USAGE, "must be positive"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(argv, code, needle, capsys):
    got, _, err = _run(argv, capsys)
    assert got == code
    assert needle in _one_line_error(err, argv[0])


def test_untraceable_model_says_why(capsys):
    code, _, err = _run(["plan", "tests.test_cli_errors:branchy", "--device-kind", "cpu"], capsys)
    assert code == EXIT_TRACE
    line = _one_line_error(err)
    assert "tracing failed" in line and "fake tensors have shapes but no values" in line


class Recurrent(nn.Module):
    """An LSTM LM: Dynamo skips the whole forward (``allow_rnn`` off), so nothing compiles."""

    def __init__(self):
        super().__init__()
        self.emb, self.rnn = nn.Embedding(32, 16), nn.LSTM(16, 16, batch_first=True)
        self.head = nn.Linear(16, 32)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0]).sum()


def recurrent():
    return Recurrent(), (torch.randint(0, 32, (2, 8)),)


def test_a_model_dynamo_skips_says_why_nothing_compiled(capsys):
    code, _, err = _run(["plan", "tests.test_cli_errors:recurrent", "--budget", "0.5"], capsys)
    assert code == EXIT_TRACE
    assert _one_line_error(err) == (
        "memopt plan: error: torch.compile compiled no graph of Recurrent's forward (it would "
        "train eagerly, with nothing to plan). Dynamo does not trace nn.LSTM (here: rnn) unless "
        "torch._dynamo.config.allow_rnn = True, which unrolls the recurrence (long compiles for "
        "long sequences)"
    )


def test_argparse_errors_exit_2(capsys):
    assert main(["plan"]) == EXIT_USAGE  # no MODEL
    assert main(["fit", "hf:gpt2"]) == EXIT_USAGE  # no --memory
    assert main(["plan", "hf:gpt2", "--optimizer", "lion"]) == EXIT_USAGE
    capsys.readouterr()


def test_console_entry_point_exit_code():
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run(
        [sys.executable, "-m", "memopt", "plan", "no_such_module:factory"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == EXIT_MODEL
    assert proc.stderr.strip().startswith("memopt plan: error: cannot import 'no_such_module'")
    assert "Traceback" not in proc.stderr
