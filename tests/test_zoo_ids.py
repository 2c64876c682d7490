"""Stable ids: a saved tensor that no cluster can recompute is named from its op, its module
and its occurrence (``Saved_<Op>_<module>_<k>+``), not from FX node numbering; the ids work
in plan strings. Probe level 0 keeps SDPA's outputs out of every cluster (level 1 recomputes
attention: ``Attention+``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import memopt
import memopt.passes.pipeline as pipeline
from memopt.decide import decide, saved_id
from memopt.errors import PlanError
from memopt.naming import MAX_SAVED_ID, shorten_saved_id
from memopt.plan import PlanSpec, Strategy


class Attention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return x + self.out(y.transpose(1, 2).reshape(b, s, d))


class Net(nn.Module):
    """Two attention layers; with ``prelude`` the graph first runs ops of its own, so every
    later node is numbered differently."""

    def __init__(self, prelude: bool):
        super().__init__()
        self.prelude = prelude
        self.layers = nn.ModuleList(Attention() for _ in range(2))

    def forward(self, x):
        if self.prelude:
            a, b = x.split(16, dim=-1)  # getitem nodes: the layers' getitems renumber
            s, m = torch.std_mean(x, dim=-1, keepdim=True)
            x = torch.cat([b, a], dim=-1) * s + m
        for layer in self.layers:
            x = layer(x)
        return x.pow(2).mean()


def _saved_ids(model, x, monkeypatch) -> tuple[set[str], set[str]]:
    """(saved ids, root node names) of the tensors no cluster can recompute."""
    results = []
    original = pipeline.run_pipeline

    def spy(*args, **kwargs):
        results.append(original(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(pipeline, "run_pipeline", spy)
    torch._dynamo.reset()
    memopt.optimize(model, level=0, probe_level=0)(x).backward()
    plain = [c for r in results for c in r.candidates if c.cluster_id is None]
    return {saved_id(c.root) for c in plain}, {str(c.root) for c in plain}


def test_saved_ids_do_not_depend_on_node_numbering(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    ids_a, names_a = _saved_ids(Net(prelude=False), x, monkeypatch)
    ids_b, names_b = _saved_ids(Net(prelude=True), x, monkeypatch)
    assert names_a != names_b  # the node names moved ...
    layer_ids = {i for i in ids_a if "layers" in i}
    assert layer_ids and layer_ids <= ids_b  # ... the ids of the layers' tensors did not
    # SDPA's two saved outputs (out, logsumexp) in layer 0
    sdpa = "Saved_Attention_layers_0"
    assert {f"{sdpa}_0+", f"{sdpa}_1+"} <= ids_a
    for i in ids_a | ids_b:
        assert len(i) <= MAX_SAVED_ID and i.startswith("Saved_") and i.endswith("+")
        assert str(PlanSpec(i, Strategy.KEEP, -1)).startswith(i)  # a valid plan id


def test_saved_id_plan_strings_reach_decide(monkeypatch):
    torch.manual_seed(0)
    results = []
    original = pipeline.run_pipeline
    monkeypatch.setattr(
        pipeline, "run_pipeline", lambda *a, **k: results.append(original(*a, **k)) or results[-1]
    )
    memopt.optimize(Net(prelude=False), level=0, probe_level=0)(torch.randn(2, 8, 32)).backward()
    cands = results[0].candidates
    plain = next(c for c in cands if c.cluster_id is None)
    sid = saved_id(plain.root)
    d = decide(cands, level=0, plans=[PlanSpec(sid, Strategy.OFFLOAD, -1)], strict=True)
    assert d.per_root == {plain.root: Strategy.OFFLOAD}
    assert d.frozen()["config"] == [f"{sid}:3:-1"]
    # end to end: a plan string with the id, strict (an unknown id would raise)
    torch._dynamo.reset()
    opt = memopt.optimize(Net(prelude=True), config=[f"{sid}:0:-1"], strict=True, probe_level=0)
    opt(torch.randn(2, 8, 32)).backward()
    rows = memopt.report(opt).to_dict()["plans"]
    assert [r["source"] for r in rows if r["cluster_id"] == sid] == ["plan"]
    # the node-name form is no longer an id
    with pytest.raises(PlanError, match="unknown cluster id"):
        decide(cands, level=0, plans=[PlanSpec(f"Saved_{plain.root}+", 3, -1)], strict=True)


def test_long_saved_ids_are_shortened_deterministically():
    path = ("model", "decoder", "layers", "11", "self_attn")
    full = shorten_saved_id("Convolution", path, 2, limit=200)
    assert full == "Saved_Convolution_model_decoder_layers_11_self_attn_2+"
    op = "ScaledDotProductFlashAttentionForCpu"
    short = shorten_saved_id(op, path, 2, limit=56)  # the op cut, the path's head dropped
    assert short == shorten_saved_id(op, path, 2, limit=56)
    assert short == "Saved_ScaledDotProductFlashAtt_11_self_attn_2_hc87b0e9a+"  # 56 characters
    assert shorten_saved_id(op, path, 2, limit=40).startswith("Saved_ScaledDotProductFlashAtt_2_h")
    other = shorten_saved_id(op, path, 3, limit=56)
    assert other != short
