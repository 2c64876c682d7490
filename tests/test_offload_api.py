"""Activation offload through memopt.optimize: offload_layers=k, sync=..., and Cluster:3:N."""

from __future__ import annotations

import pytest
import torch

import memopt
from tests.helpers import compare, tiny_llama


def _model():
    torch.manual_seed(0)
    return tiny_llama(num_hidden_layers=3)


def test_offload_layers_numerics_report_and_timeline():
    model = _model()
    ids = torch.randint(1, 128, (4, 64))
    rep, _, _, _ = compare(
        model, {"input_ids": ids, "labels": ids}, offload_layers=2, offload_min_bytes=0
    )
    off = rep.regions[0].extra["offload"]
    assert off["synchronous"]  # no CUDA here: synchronous host copies
    assert sorted(off["bytes_per_layer"]) == ["0", "1"]
    assert rep.offloaded_bytes() == off["total_bytes"] > 0
    text = rep.table()
    assert "copies synchronous (no CUDA device)" in text
    assert "are offloaded to host memory" in text
    assert rep.regions[0].extra["layers"]["names"] == [f"model.layers.{i}" for i in range(3)]


def test_strategy3_plan_offloads_that_cluster_only():
    model = _model()
    ids = torch.randint(1, 128, (4, 64))
    opt = memopt.optimize(model, config="MatMul+:3:-1", offload_min_bytes=0)
    opt(input_ids=ids, labels=ids).loss.backward()
    rep = memopt.report(opt)
    off = rep.regions[0].extra["offload"]
    names = {n for t in off["offloaded"] for n in t["saved"]}
    assert names and all(n.startswith("mm") for n in names), names
    row = next(p for p in rep.to_dict()["plans"] if p["cluster_id"] == "MatMul+")
    assert row["enabled"] and row["strategy"] == 3
    assert row["saving_bytes"] == off["total_bytes"]


def test_offload_layers_too_many_is_a_clear_error_at_once():
    """Checked against the model's layers when optimize() is called, not at the first
    forward inside a compile."""
    with pytest.raises(memopt.ConfigError) as e:
        memopt.optimize(_model(), offload_layers=3)
    assert "offload_layers=3 must be below the number of layers (3" in str(e.value)


def test_a_sync_entry_for_a_missing_layer_is_named_once():
    with pytest.raises(memopt.ConfigError) as e:
        memopt.optimize(_model(), sync={99: (True, 1, False, 0)})
    text = str(e.value)
    assert "sync: layer(s) 99 outside 0..2 (the model has 3 layers" in text
    assert "sync: sync" not in text


def test_offload_layers_count_both_stacks_of_an_encoder_decoder():
    """The check at optimize() counts the layers as detect_layers does: the largest container
    and every container of its attribute name (encoder.layers + decoder.layers), not a conv
    front end's conv_layers."""

    class Stack(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    class EncDec(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
            self.encoder, self.decoder = Stack(2), Stack(3)

    memopt.optimize(EncDec(), offload_layers=4)  # 5 layers over both stacks
    memopt.optimize(EncDec(), sync={3: (True, 1, False, 1)})
    with pytest.raises(memopt.ConfigError) as e:
        memopt.optimize(EncDec(), offload_layers=5)
    assert "offload_layers=5 must be below the number of layers (5" in str(e.value)
