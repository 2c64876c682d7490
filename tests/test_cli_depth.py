"""Depth extrapolation: tracing 2 and 3 layers and extending to 5 gives the same plan table,
saved bytes and peak as tracing all 5 (tiny Llama, levels 0 and 1)."""

from __future__ import annotations

import torch

from memopt.cli import analyze as analyze_mod
from memopt.cli import models
from memopt.cli.analyze import Request, analyze
from memopt.config import resolve_config

TINY_LLAMA_5 = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}


def _rows(report) -> dict:
    return {c["cluster_id"]: (c["freq"], c["saving_symbolic"]) for c in report.clusters()}


def test_extrapolated_depth_matches_full_depth(monkeypatch):
    monkeypatch.setattr(analyze_mod, "FULL_DEPTH_UP_TO", 3)  # extrapolate from 4 layers on
    source = models.resolve("hf:llama", TINY_LLAMA_5)
    assert source.num_layers == 5
    configs = [resolve_config(level=0), resolve_config(level=1)]
    runs = {}
    for depth in ("auto", "full"):
        request = Request(batch=4, seq=64, dtype=torch.float32, device_kind="cpu", depth=depth)
        runs[depth] = analyze(source, request, configs)
    auto, full = runs["auto"], runs["full"]
    assert auto.traced_depths == [2, 3] and full.traced_depths == [None]
    for level in (0, 1):
        a, f = auto.reports[level], full.reports[level]
        assert _rows(a) == _rows(f)
        assert a.saved_bytes() == f.saved_bytes()
        excluded = [sorted(e["symbolic"] for r in x.regions for e in r.excluded) for x in (a, f)]
        assert excluded[0] == excluded[1]
        pa, pf = auto.peaks[level].at(auto.values), full.peaks[level].at(full.values)
        assert pa.bytes == pf.bytes
        assert auto.peaks[level].profile.saved == full.peaks[level].profile.saved
    assert auto.reports[1].saved_bytes()[1] < auto.reports[0].saved_bytes()[1]
