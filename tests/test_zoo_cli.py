"""``memopt plan`` on a model that reads a tensor's value (``.item()``): training graph-breaks
there, and so does the trace; each region is planned and the break is named."""

from __future__ import annotations

import json

import torch
import torch.nn as nn
import torch.nn.functional as F

import memopt
from memopt.cli.main import main
from memopt.measure import measure_saved


class ItemScale(nn.Module):
    """Scales its hidden layer by a Python float read from a tensor (``.item()``)."""

    def __init__(self, d: int = 32):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        h = F.gelu(self.up(x))
        scale = h.abs().mean().item()
        return self.down(h / (scale + 1.0)).pow(2).mean()


def item_scale(batch: int = 4, seq: int = 8):
    return ItemScale(), {"x": torch.randn(batch, seq, 32)}


#: the line of ``.item()`` in ItemScale.forward
ITEM_LINE = next(i for i, line in enumerate(open(__file__), 1) if "scale = h.abs()" in line)


def test_plan_splits_at_item_and_names_the_break(capsys, tmp_path):
    report = tmp_path / "report.json"
    argv = ["plan", "tests.test_zoo_cli:item_scale", "--device-kind", "cpu"]
    code = main([*argv, "--batch", "4", "--seq", "8", "--save-report", str(report)])
    out, err = capsys.readouterr()
    assert code == 0, err
    where = f"test_zoo_cli.py:{ITEM_LINE}"
    assert f"graph break at {where}: Unsupported Tensor.item()" in out
    assert f".item() at {where}: eager code between graphs" in out
    assert "(traced with 1.0)" in out
    doc = json.loads(report.read_text())
    assert any("Tensor.item()" in n for n in doc["notes"])
    # one plan per region, as training compiles it: region 1 saves the up-projection and
    # GELU's output (2 x 128 floats a token), region 2 the scaled hidden layer and the output
    regions = doc["report"]["regions"]
    assert [r["baseline_saved_symbolic"] for r in regions] == ["1024*batch*seq", "640*batch*seq"]
    # a real training step of the same model saves what the plan says
    model, inputs = item_scale(4, 8)
    torch._dynamo.reset()
    opt = memopt.optimize(model)
    exclude = [*model.parameters(), *inputs.values()]
    loss, saved = measure_saved(lambda: opt(**inputs), exclude)
    loss.backward()
    assert len(memopt.report(opt).regions) == 2
    assert saved.compiled == (1024 + 640) * 4 * 8 and saved.eager == 0
