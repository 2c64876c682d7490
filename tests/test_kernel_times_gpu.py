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


@pytest.fixture(autouse=True)
def _calibrates_as_a_new_process(monkeypatch):
    """A test that ran before in this process may have found no room to calibrate: the process
    then plans on nominal rates (``costs._unmeasured``) and would measure nothing here."""
    from memopt.planner import costs

    monkeypatch.setattr(costs, "_unmeasured", {})


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


def test_calibration_in_a_smaller_room_measures_the_same_rates(tmp_path):
    """The smallest measurement (256 MiB: 128 MiB copies, 4096-squared matmuls, 64 MiB
    transfers, each repeated) against the full one (2 GiB)."""
    dev = torch.device("cuda")
    full = calibrate(dev, None)
    small = calibrate(dev, None, room=256 << 20)
    assert small.source == "measured"
    for k in ("matmul_flops_per_s", "hbm_bytes_per_s", "h2d_bytes_per_s", "d2h_bytes_per_s"):
        assert 0.8 < getattr(small, k) / getattr(full, k) < 1.25, (k, small, full)


def test_measurements_on_a_cold_cache_stay_under_a_byte_budget(tmp_path, monkeypatch):
    """On a fresh machine memopt calibrates the device and times the graph's kernels inside
    the first step's compile: under a byte budget what they allocate must fit under it (the
    full calibration's 2 GiB put ViT's first step 25% over a 1.9 GB budget). Every peak the
    allocator reached by the end of each measurement is recorded."""
    from memopt import _torch_compat as compat
    from memopt.planner import costs

    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path))
    peaks: dict[str, list[int]] = {"rates": [], "kernels": []}

    def spy(kind, fn):
        def run(*args, **kwargs):
            out = fn(*args, **kwargs)
            torch.cuda.synchronize()
            peaks[kind].append(torch.cuda.max_memory_allocated())
            return out

        return run

    monkeypatch.setattr(costs, "_measure", spy("rates", costs._measure))
    monkeypatch.setattr(kt, "time_kernel", spy("kernels", kt.time_kernel))
    torch.manual_seed(0)
    width, rows, depth = 4096, 8192, 6
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to("cuda", torch.bfloat16)
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    budget = 1_000_000_000  # parameters and input 0.27 GB
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with compat.no_compile_caches():
        memopt.optimize(model, budget=budget)(x).float().square().mean().backward()
    assert len(peaks["rates"]) == 1 and len(peaks["kernels"]) >= 2  # mm forward, backward
    assert max(peaks["rates"] + peaks["kernels"]) <= budget, peaks


def test_queued_timing_times_a_small_kernel_without_the_hosts_dispatch(monkeypatch):
    """A kernel far shorter than its eager dispatch (an add of 4096 bf16 elements) is timed at
    the dispatch when its runs are issued one by one; queued behind a GPU sleep, at least 3x
    less (the default since the thirty-ninth session; ``MEMOPT_KERNEL_TIMING=issued`` the old
    way)."""
    dev = torch.device("cuda")
    x = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    g = make_fx(lambda a: a + a, tracing_mode="fake")(x)
    node = next(n for n in g.graph.nodes if n.op == "call_function")
    monkeypatch.setenv(kt.TIMING_ENV, "issued")
    issued = kt.time_kernel(node, dev, int)
    monkeypatch.delenv(kt.TIMING_ENV)
    queued = kt.time_kernel(node, dev, int)
    assert issued is not None and queued is not None and 3 * queued < issued
