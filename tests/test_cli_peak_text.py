"""memopt plan's peak table prints formulas as a person writes them (no raw sympy)."""

import sympy
import torch
from torch.utils._sympy.functions import CeilToInt, IntTrueDiv

from memopt.cli.liveness import PhasePeak, StepProfile
from memopt.cli.peak import PeakModel, Static


def test_peak_table_formulas_are_readable():
    batch, seq = sympy.symbols("batch seq", integer=True, positive=True)
    acts = 4096 * batch * CeilToInt(IntTrueDiv(seq, 32))
    phase = PhasePeak(activations=acts, gradients=sympy.Integer(1024), temporaries=2 * batch * seq)
    profile = StepProfile(
        phases={"forward": phase},
        saved=acts,
        gradients=sympy.Integer(1024),
        inputs=16 * batch * seq,
    )
    static = Static(
        parameters=1024, gradients=1024, optimizer=2048, num_parameters=256, optimizer_text="adamw"
    )
    table = PeakModel(static, profile).at({"batch": 2, "seq": 64}).table()
    lines = table.split("\n")
    # parameters 1024 + optimizer 2048 + inputs 16*2*64 + activations 4096*2*2 + gradients 1024
    # + temporaries 2*2*64 = 22,784 bytes
    assert lines[0] == (
        "Predicted peak of one training step: 22.25 KiB (22,784 B), at the end of the forward"
    )
    assert "CeilToInt" not in table and "IntTrueDiv" not in table
    activations = next(ln for ln in lines if ln.lstrip().startswith("activations"))
    assert "= 4096*batch*ceil(seq/32)" in activations
    total = lines[-1]
    assert total.split("= ", 1)[1] == "18*batch*seq + 4096*batch*ceil(seq/32) + 4096"


def test_peak_with_a_size_without_value_says_which():
    """A size no value was given for (an input whose dims are neither batch nor seq) makes
    the peak unknown, said as such, not printed as -1 B."""
    batch, seq, n = sympy.symbols("batch seq labels_dim0", integer=True, positive=True)
    phase = PhasePeak(
        activations=64 * batch * seq, gradients=sympy.Integer(0), temporaries=sympy.Integer(0)
    )
    profile = StepProfile(
        phases={"forward": phase}, saved=64 * batch * seq, gradients=sympy.Integer(0), inputs=8 * n
    )
    static = Static(
        parameters=1024, gradients=1024, optimizer=0, num_parameters=256, optimizer_text="none"
    )
    lines = PeakModel(static, profile).at({"batch": 2, "seq": 64}).table().split("\n")
    assert lines[0] == (
        "Predicted peak of one training step: unknown at these sizes, at the end of the "
        "forward: no value for labels_dim0 (the formula below holds)"
    )
    assert lines[-1].split()[:2] == ["total", "?"]
    assert "-1 B" not in "\n".join(lines)


class MaskedLM(torch.nn.Module):
    """Labels of their own shape (one label per sequence): their dims are separate symbols."""

    def __init__(self, vocab: int = 64, d: int = 32):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, input_ids, labels):
        logits = self.head(torch.relu(self.emb(input_ids))).mean(1)
        return torch.nn.functional.cross_entropy(logits, labels)


def masked_lm(batch: int = 4, seq: int = 16):
    return MaskedLM(), {
        "input_ids": torch.randint(0, 64, (batch, seq)),
        "labels": torch.randint(0, 64, (batch,)),
    }


def test_plan_peak_counts_inputs_of_their_own_shape(capsys):
    """``memopt plan`` gives every traced size its value: the labels' bytes are known."""
    import json

    from memopt.cli.main import main

    argv = ["plan", "tests.test_cli_peak_text:masked_lm", "--batch", "4", "--seq", "16"]
    rc = main([*argv, "--device-kind", "cpu", "--json"])
    assert rc == 0
    peak = json.loads(capsys.readouterr().out)["peak"]
    assert peak["peak_bytes"] > 0
    # int64 token ids (4 x 16) and labels (4)
    assert peak["components"]["inputs"]["bytes"] == 8 * 4 * 16 + 8 * 4
