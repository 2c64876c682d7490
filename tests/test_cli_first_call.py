"""``memopt plan`` on what a model does outside its parameters and buffers.

It traces the step training runs from its second step on: a model whose first call does
one-time setup that breaks the graph (transformers 5 installs its output-capturing hooks under
a threading.Lock: DPT, docs/data/sweep8/diag_dpt) is called once eagerly before the trace, so
the plan has the one region training compiles after its first step, and the predicted bytes are
that step's. A plain tensor attribute built on the meta device is traced as a fake (sweep 9's
QwenImage)."""

from __future__ import annotations

import contextlib
import io
import json

import torch

from memopt.cli.main import main
from memopt.measure import measure_saved
from tests.test_zoo import _FirstCallSetup


def model(batch: int = 4):
    return _FirstCallSetup(), {"x": torch.randn(batch, 8, 16)}


def test_a_first_call_setup_is_done_before_the_trace_and_the_plan_is_the_steady_step():
    out = io.StringIO()
    argv = ["plan", "tests.test_cli_first_call:model", "--device-kind", "cpu", "--batch", "4"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--json"]) == 0
    report = json.loads(out.getvalue())["report"]
    assert len(report["regions"]) == 1
    # one real step after the first call: what training saves from its second step on
    torch.manual_seed(0)
    net, inputs = model()
    with torch.no_grad():
        net(**inputs)
    torch._dynamo.reset()
    compiled = torch.compile(net)
    _, saved = measure_saved(lambda: compiled(**inputs), [*net.parameters(), inputs["x"]])
    torch._dynamo.reset()
    assert report["saved_bytes_before"] == saved.compiled == 6144 and saved.eager == 0


class _Rotary(torch.nn.Module):
    """Frequencies kept as a plain tensor attribute, not a buffer (diffusers' QwenImage
    rotary embedding, sweep 9): built on the meta device it holds no data."""

    def __init__(self) -> None:
        super().__init__()
        self.freqs = torch.arange(16, dtype=torch.float32) / 16
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        return (self.proj(x) * torch.cos(self.freqs.to(x.device))).square().mean()


def rotary(batch: int = 4):
    return _Rotary(), {"x": torch.randn(batch, 8, 16)}


def test_a_plain_tensor_attribute_built_on_meta_is_traced_as_a_fake():
    """Before, the trace failed: "Cannot copy out of meta tensor; no data!"."""
    out = io.StringIO()
    argv = ["plan", "tests.test_cli_first_call:rotary", "--device-kind", "cpu", "--batch", "4"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--json"]) == 0
    report = json.loads(out.getvalue())["report"]
    assert len(report["regions"]) == 1 and report["saved_bytes_before"] > 0
