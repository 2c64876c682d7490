"""memopt.optimize(model, param_offload=f) + memopt.CPUAdamW through the public entry point."""

from __future__ import annotations

import copy

import pytest
import torch

import memopt
from tests.helpers import tiny_llama


def test_optimize_param_offload_trains_like_adamw_and_reports_placement():
    torch.manual_seed(0)
    ref = tiny_llama(num_hidden_layers=4)
    model = copy.deepcopy(ref)
    ids = torch.randint(1, 128, (2, 12))
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    opt_model = memopt.optimize(model, param_offload=0.5)
    handle = memopt.param_offload_handle(opt_model)
    assert handle is not None and handle is memopt.param_offload_handle(model)
    opt = memopt.CPUAdamW(model.parameters(), lr=1e-2, param_offload=handle)
    for _ in range(2):
        ref_opt.zero_grad()
        ref(input_ids=ids, labels=ids).loss.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = opt_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
    with torch.no_grad():
        torch.testing.assert_close(
            opt_model(input_ids=ids, labels=ids).loss, ref(input_ids=ids, labels=ids).loss
        )
    rep = memopt.report(opt_model, optimizer=opt)
    rows = rep.to_dict()["placement"]
    streamed = [r for r in rows if r.get("where") == "cpu" and r.get("kind") != "optimizer"]
    assert streamed, rows
    assert "total MiB:" in rep.table()


def test_param_offload_fraction_validated():
    with pytest.raises(memopt.ConfigError, match=r"param_offload=1.5 must be a number in \[0, 1\)"):
        memopt.optimize(tiny_llama(), param_offload=1.5)
