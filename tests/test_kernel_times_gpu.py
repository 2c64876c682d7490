"""Kernel times on CUDA: a budget plan times the graph's matmuls, attention and reductions
once, caches them, and prices them near what the roofline says for a large matmul; a
reduction takes no less than its bytes at the copy rate."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import memopt
from memopt import facts
from memopt import kernel_times as kt
from memopt.passes.build_planning_problem import Sizes, op_cost
from memopt.planner import roofline_s
from memopt.planner.costs import calibrate

pytestmark = pytest.mark.gpu


def test_a_large_matmul_takes_about_its_roofline_and_causal_attention_less(tmp_path):
    dev = torch.device("cuda")

    def f(a, b, q):
        return a @ b, F.scaled_dot_product_attention(q, q, q, is_causal=True)

    bf = torch.bfloat16
    args = (
        torch.randn(8192, 8192, device=dev, dtype=bf),
        torch.randn(8192, 8192, device=dev, dtype=bf),
        torch.randn(4, 16, 4096, 128, device=dev, dtype=bf),
    )
    g = make_fx(f, tracing_mode="fake")(*args)
    rates = calibrate(dev, str(tmp_path))
    table = kt.measure([g], dev, int, str(tmp_path))
    assert len(table) == 2
    sizes = Sizes(int)
    mm, att = (n for n in g.graph.nodes if kt.signature(n, int) is not None)
    mm_roof = roofline_s(op_cost(mm, sizes), rates)
    assert 0.7 < table[kt.signature(mm, int)] / mm_roof < 1.4  # the calibration's own shape
    att_roof = roofline_s(op_cost(att, sizes), rates)  # full s*s FLOPs at the matmul rate
    assert table[kt.signature(att, int)] < 1.5 * att_roof


def test_reductions_are_timed_and_take_no_less_than_their_bytes_at_the_copy_rate(tmp_path):
    """Whisper's encoder rows at batch 8 (1500 frames of width 768, bf16): the var_mean of the
    fp32 upcast a decomposed layer norm reduces, a row max (a softmax's first pass), a bias
    gradient's column sum and a layer norm left whole are each timed, and none beats reading
    and writing its bytes at half the calibrated copy rate."""
    dev = torch.device("cuda")

    def f(x, w, b):
        var, mean = torch.var_mean(x.float(), -1, correction=0, keepdim=True)
        y = F.layer_norm(x, (768,), w, b)
        return var, mean, torch.amax(x, -1, keepdim=True), x.sum((0, 1)), y

    bf = torch.bfloat16
    x = torch.randn(8, 1500, 768, device=dev, dtype=bf)
    args = (x, torch.randn(768, device=dev, dtype=bf), torch.randn(768, device=dev, dtype=bf))
    g = make_fx(f, tracing_mode="fake")(*args)
    rates = calibrate(dev, str(tmp_path))
    table = kt.measure([g], dev, int, str(tmp_path))
    nodes = kt.signatures([g], int)
    assert sorted(str(n.target) for n in nodes.values()) == [
        "aten.amax.default",
        "aten.native_layer_norm.default",
        "aten.sum.dim_IntList",
        "aten.var_mean.correction",
    ]
    assert set(table) == set(nodes)
    for s, n in nodes.items():  # what the op alone reads and writes
        moved = facts.nbytes(n.meta["val"], int) + sum(
            facts.nbytes(a.meta["val"], int) for a in n.all_input_nodes
        )
        assert table[s] > 0.5 * moved / rates.hbm_bytes_per_s, (s, table[s], moved)


def test_a_budget_plan_times_its_kernels_once_and_caches_them(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path))

    class Block(torch.nn.Module):
        def __init__(self, d=1024):
            super().__init__()
            self.a, self.b = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.b(F.gelu(self.a(x)))

    model = torch.nn.Sequential(*[Block() for _ in range(4)]).cuda()
    x = torch.randn(8, 512, 1024, device="cuda", requires_grad=True)
    compiled = memopt.optimize(model, budget=0.5)
    compiled(x).sum().backward()
    files = [f for f in os.listdir(os.path.join(tmp_path, "rates")) if f.startswith("kernels-")]
    assert len(files) == 1
    kernels = json.load(open(os.path.join(tmp_path, "rates", files[0])))["kernels"]
    assert any("addmm" in k or "mm.default" in k for k in kernels)
    assert any(k.startswith("aten.sum.dim_IntList(") for k in kernels)  # the bias gradients
    planner = [r.extra["planner"] for r in memopt.report(compiled).regions if "planner" in r.extra]
    assert planner and all(p["kernels_timed"] > 0 for p in planner)
