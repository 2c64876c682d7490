"""A model of which torch.compile compiles nothing that trains: memopt says so once, after the
first forward that trains, naming what was asked and the likely cause (memopt.coverage)."""

from __future__ import annotations

import logging

import torch
from torch import nn

import memopt


class _RnnLM(nn.Module):
    def __init__(self, cell: type[nn.Module] = nn.LSTM) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.rnn = cell(16, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 32)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.head(h)


class _Skipped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    @torch._dynamo.disable
    def forward(self, x):
        return self.lin(x).relu()


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "planned nothing" in r.getMessage()]


def test_an_lstm_the_compiler_skips_is_said_with_its_cause(caplog):
    torch._dynamo.reset()
    model = _RnnLM()
    opt = memopt.optimize(model, budget=0.5)
    ids = torch.randint(0, 32, (2, 8))
    with caplog.at_level(logging.WARNING, logger="memopt"):
        with torch.no_grad():
            opt(ids)  # no training forward yet: nothing to say
        assert _warnings(caplog) == []
        for _ in range(2):
            opt(ids).sum().backward()
    (said,) = _warnings(caplog)  # once
    assert said == (
        "memopt: torch.compile compiled no graph of _RnnLM's forward: it ran eagerly, so memopt "
        "planned nothing and budget=0.5 had no effect. Dynamo does not trace nn.LSTM (here: rnn) "
        "unless torch._dynamo.config.allow_rnn = True, which unrolls the recurrence (long "
        "compiles for long sequences)."
    )
    rep = memopt.report(opt)
    assert rep.regions == [] and rep.notes == (said.removeprefix("memopt: "),)
    assert f"Warning: {rep.notes[0][:40]}" in rep.table()
    assert rep.to_dict()["notes"] == list(rep.notes)


def test_a_forward_dynamo_may_not_trace_names_explain(caplog):
    torch._dynamo.reset()
    opt = memopt.optimize(_Skipped(), level=1, offload_layers=1)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt(torch.randn(4, 8)).sum().backward()
    (said,) = _warnings(caplog)
    assert "compiled no graph of _Skipped's forward" in said
    assert "level=1, offload_layers=1 had no effect" in said
    assert "torch._dynamo.explain(model)(*inputs) lists the graph breaks" in said


def test_a_model_that_compiles_says_nothing(caplog):
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))
    opt = memopt.optimize(model, budget=0.5)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt(torch.randn(4, 8)).sum().backward()
    assert _warnings(caplog) == [] and memopt.report(opt).notes == ()
    assert len(memopt.report(opt).regions) == 1


class _Codes(nn.Module):
    """A region that reads weights but returns integer codes (Encodec's quantizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.emb, self.dec = nn.Linear(16, 8), nn.Embedding(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        idx = self.enc(x).argmax(-1)
        torch._dynamo.graph_break()
        return self.dec(self.emb(idx)).square().mean()


def test_a_region_whose_outputs_need_no_gradient_is_no_cache_hit(caplog):
    """Its graph compiles without a backward (the partitioner never runs): that was taken for
    a compile-cache hit without a stored report, and said so with every cache off."""
    from memopt import _torch_compat as compat

    torch._dynamo.reset()
    torch.manual_seed(0)
    with compat.no_compile_caches(), caplog.at_level(logging.WARNING, logger="memopt"):
        opt = memopt.optimize(_Codes(), level=1)
        opt(torch.randn(32, 16)).backward()
    assert not [m for m in caplog.messages if "cache hit" in m], caplog.messages
    assert len(memopt.report(opt).regions) == 1  # the decoder's region
