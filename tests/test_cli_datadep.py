"""``memopt plan`` on models with data-dependent code: traced as training runs them.

Training graph-breaks where Python code needs a value or an op's output size depends on
values, and runs that code eagerly between compiled regions. ``memopt plan`` does the same on
fake tensors: each region is planned, the breaks and the stand-ins the eager code got are
named (:mod:`memopt.cli.eager`), and an eager op with no stand-in stops the trace with the
regions before it planned.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from memopt import _torch_compat as compat
from memopt.cli.eager import stand_in_op
from memopt.cli.main import main

D = 32


class TwoBlocks(nn.Module):
    """Two MLP blocks with data-dependent eager code between them: ``.item()`` and a boolean
    mask (``nonzero``) that picks the token rows going on, or ``repeat_interleave`` with
    tensor repeats (no stand-in: the trace stops there)."""

    def __init__(self, between: str):
        super().__init__()
        self.between = between
        self.up = nn.Linear(D, 4 * D)
        self.down = nn.Linear(4 * D, D)

    def forward(self, x):
        h = F.gelu(self.up(x))
        if self.between == "repeat":
            counts = (h[..., 0] > 0).long().flatten()
            rows = torch.repeat_interleave(h.flatten(0, -2), counts, dim=0)  # line: REPEAT
        else:
            scale = h.abs().mean().item()  # line: ITEM
            rows = h[h.sum(-1) > 0]  # line: MASK
            rows = rows / (scale + 1.0)
        return self.down(rows).pow(2).mean()


def two_blocks(batch: int = 4, seq: int = 8):
    return TwoBlocks("mask"), {"x": torch.randn(batch, seq, D)}


def two_blocks_repeat(batch: int = 4, seq: int = 8):
    return TwoBlocks("repeat"), {"x": torch.randn(batch, seq, D)}


class Checked(nn.Module):
    """A data check that must hold between two blocks, as transformers' VLMs check their
    image-token count (``torch_compilable_check``: ``torch._check_tensor_all``)."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, ids):
        h = F.gelu(self.up(x))
        n = (ids == 5).sum(dim=1)
        torch._check_tensor_all(n == ids.shape[1] // 2)  # line: CHECK
        torch._assert((n > 0).all(), "no image token")
        return self.down(h).pow(2).mean()


def checked(batch: int = 4, seq: int = 8):
    ids = torch.zeros(batch, seq, dtype=torch.long)
    ids[:, : seq // 2] = 5
    return Checked(), {"x": torch.randn(batch, seq, D), "ids": ids}


def _line(tag: str) -> str:
    n = next(i for i, line in enumerate(open(__file__), 1) if f"# line: {tag}" in line)
    return f"test_cli_datadep.py:{n}"


def _plan(capsys, tmp_path, model: str, *extra: str) -> tuple[str, dict]:
    report = tmp_path / "report.json"
    argv = ["plan", model, "--device-kind", "cpu", *extra, "--save-report", str(report)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, json.loads(report.read_text())


def test_item_and_mask_between_blocks(capsys, tmp_path):
    model = "tests.test_cli_datadep:two_blocks"
    out, doc = _plan(capsys, tmp_path, model, "--batch", "4", "--seq", "8")
    notes = doc["notes"]
    assert notes[0] == (
        "2 compiled regions, split at the graph breaks below; each is planned as training "
        "compiles it"
    )
    assert f"graph break at {_line('ITEM')}: Unsupported Tensor.item() call" in notes[1]
    assert f"graph break at {_line('MASK')}: Dynamic shape operator" in notes
    assert (
        f".item() at {_line('ITEM')}: eager code between graphs; its value is not known when "
        "planning (traced with 1.0)"
    ) in notes
    assert (
        f"nonzero at {_line('MASK')}: eager code between graphs; its output size depends on "
        "values (traced with its largest output: all 32 elements nonzero)"
    ) in notes
    assert "note: 2 compiled regions" in out
    regions = doc["report"]["regions"]
    # region 1 saves GELU's input and output (2 x 128 floats a token); region 2 its rows,
    # every one of the 4 x 8 tokens (the mask's stand-in), scaled, and down's output
    assert [r["baseline_saved_symbolic"] for r in regions] == ["1024*batch*seq", "20480"]


def test_torchs_own_checks_hold_on_stand_ins(capsys, tmp_path):
    """Where ``if bad.any(): raise`` gets False, torch's checks get True: they must hold (a
    sweep's Llava: "tracing failed: RuntimeError: Expected cond to be True")."""
    _, doc = _plan(capsys, tmp_path, "tests.test_cli_datadep:checked", "--batch", "4")
    assert (
        f".item() at {_line('CHECK')}: eager code between graphs; its value is not known when "
        "planning (traced with True)"
    ) in doc["notes"]
    assert any("bool() at" in n and n.endswith("(traced with True)") for n in doc["notes"])
    assert len(doc["report"]["regions"]) == 2


def test_op_without_stand_in_stops_the_trace_and_plans_what_came_before(capsys, tmp_path):
    model = "tests.test_cli_datadep:two_blocks_repeat"
    out, doc = _plan(capsys, tmp_path, model, "--batch", "4", "--seq", "8")
    stop = (
        f"trace stopped at repeat_interleave at {_line('REPEAT')}: eager code between graphs "
        "that fake tensors cannot run (DynamicOutputShapeException: no stand-in for this op); "
        "planned: the 1 region before it; not planned: everything after it, its own backward "
        "included (the predicted peak leaves them out)"
    )
    assert doc["notes"][0].startswith("1 compiled region, split at the graph breaks below")
    assert stop in doc["notes"]
    assert f"note: {stop}" in out
    assert len(doc["report"]["regions"]) == 1


def test_stand_ins_are_the_largest_outputs():
    """The stand-in mode, alone: exact shapes, and an op without a rule keeps torch's error."""
    used: list[str] = []
    mode = compat.fake_tensor_mode_with_stand_ins(stand_in_op(used))
    with mode:
        mask = torch.empty(3, 5, dtype=torch.bool)
        x = torch.empty(3, 5)
        log_probs = torch.empty(50, 3, 20)  # T, batch, classes
        padded = torch.empty(3, 7, dtype=torch.long)
        lengths = torch.empty(3, dtype=torch.long)
    assert mask.nonzero().shape == (15, 2)
    assert x.masked_select(mask).shape == (15,)
    assert x[mask].shape == (15,)
    values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
    assert (values.shape, inverse.shape, counts.shape) == ((15,), (3, 5), (15,))
    assert torch.unique_consecutive(x).shape == (15,)
    nll, alpha = torch.ops.aten._ctc_loss(log_probs, padded, lengths, lengths)
    assert (nll.shape, alpha.shape) == ((3,), (3, 50, 15))  # 2 * 7 + 1
    nll, alpha = torch.ops.aten._ctc_loss(log_probs, padded.flatten(), [50] * 3, [2, 6, 4])
    assert alpha.shape == (3, 50, 13)
    assert F.ctc_loss(log_probs, padded, lengths, lengths).shape == ()
    assert x.sum().tolist() == 1.0
    assert len(used) == 9
    with pytest.raises(compat.fake_value_errors()):
        torch.repeat_interleave(x.flatten(), lengths.repeat(5))
    assert len(used) == 9


@pytest.mark.slow
def test_wav2vec2_plans_every_region_around_ctc(capsys, tmp_path):
    """Tiny Wav2Vec2 (transformers, from a config): training compiles 4 regions around the
    eager CTC loss; so does the plan, with masked_select's and _ctc_loss's stand-ins named."""
    pytest.importorskip("transformers")
    model = "benchmarks.zoo_models:wav2vec2"
    out, doc = _plan(capsys, tmp_path, model, "--batch", "2")
    notes = doc["notes"]
    assert notes[0].startswith("4 compiled regions, split at the graph breaks below")
    assert "graph break at loss_ctc.py:48: Dynamic shape operator" in notes
    assert any(n.startswith("masked_select at loss_ctc.py:48: eager code") for n in notes)
    assert any(
        n.startswith("_ctc_loss at loss_ctc.py:54: eager code between graphs; its alignment")
        and n.endswith("the longest target the targets' shape allows, 16 labels)")
        for n in notes
    )
    assert not any("trace stopped" in n for n in notes)
    assert len(doc["report"]["regions"]) == 4
    assert "Predicted peak of one training step" in out
    # training's report and its measured saved bytes at batch 2 (memopt.optimize, level 0:
    # 2,711,624 B compiled): the encoder region saves its input, the feature extractor's
    # (batch, 32, 159) output, an activation of region 0 (20,352 B a sample; the trace had
    # counted it as a user input before it flagged the activation inputs as training does)
    regions = doc["report"]["regions"]
    assert [r["baseline_saved_bytes"] for r in regions] == [204544, 2364616, 101760, 40704]
    assert regions[1]["baseline_saved_symbolic"] == "1149508*batch + 65600"
    assert doc["report"]["saved_bytes_before"] == 2711624
