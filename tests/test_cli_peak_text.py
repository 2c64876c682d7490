"""memopt plan's peak table prints formulas as a person writes them (no raw sympy)."""

import sympy
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
