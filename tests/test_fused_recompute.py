"""A recompute Inductor fuses into the backward's kernel (docs/planner.md, "A recompute fused
into the backward's kernel"): a SwiGLU MLP with its product and matmuls recomputed. Inductor
makes the product, the up and the gate gradient in one kernel; the planner's model of the
plan must hold what that kernel holds (measured by Inductor's own buffer plan, the region
report's ``inductor`` section, on the CPU)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import memopt
from memopt import _torch_compat as compat
from memopt import api


class SwiGLU(nn.Module):
    def __init__(self, d: int = 64, f: int = 256):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def test_the_model_holds_what_the_fused_swiglu_backward_kernel_holds(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(SwiGLU(), SwiGLU())
    x = torch.randn(8, 32, 64, requires_grad=True)
    plans = ["Silu+Reshape+Mul+:1:-1", "MatMul+:1:-1"]
    opt = memopt.optimize(model, budget=0.9, config=plans)
    opt(x).sum().backward()
    region = api._STATES[opt].regions[0]
    sec = region.extra["inductor"]
    assert sorted(region.extra["planner"]["plan_strings"]) == sorted(plans)
    # without the charge the model of this plan was 2,035,200 B, 14% under Inductor's
    # 2,366,464 B (torch 2.13)
    if not compat.tangents_held_to_the_end():
        assert sec["model_peak"] == 2_362_880
        assert abs(sec["peak"] - sec["model_peak"]) <= 0.005 * sec["model_peak"]
    else:
        # torch 2.11 (CPU): the model holds the (8, 32, 64) tangent to the backward's end
        # (65,536 B) and its peak rises by that; Inductor's buffer plan, which holds it too,
        # peaks at 2,366,976 B: the model is 2.6% over (not yet read; with 2.13's rule the
        # two agree as on 2.13)
        assert sec["model_peak"] == 2_362_880 + 65_536
        assert 0 <= sec["model_peak"] - sec["peak"] <= 0.03 * sec["peak"]


def test_a_fused_recompute_is_priced_as_the_kernel_that_makes_it(monkeypatch, tmp_path):
    """The SwiGLU product recomputed: Inductor computes it in the kernel that makes the gate
    and up gradients, which reads the gate and up outputs anyway. Its price is its output
    written once (N bytes), not ``silu`` reading the gate (N) and ``mul`` reading the up and
    writing the product (2N) as kernels of their own: 3N until the sixty-seventh session, where
    the FSDP2 step's plan at torch 0.5's peak measured 2.1 ms against 4.3 ms priced."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    model = nn.Sequential(SwiGLU(), SwiGLU())
    opt = memopt.optimize(model, budget=0.9, config=["Silu+Reshape+Mul+:1:-1"])
    opt(torch.randn(8, 32, 64, requires_grad=True)).sum().backward()
    problem = api._STATES[opt].problems[0].problem
    products = [c for c in problem.candidates if c.cluster_id == "Silu+Reshape+Mul+"]
    assert len(products) == 2
    for c in products:
        assert c.fused_charges and c.nbytes == 8 * 32 * 256 * 4
        assert [(op.bytes, op.seconds) for op in c.recompute_ops] == [(c.nbytes, None)]
