"""How kernels are timed (``MEMOPT_KERNEL_TIMING``): queued by default, ``issued`` the way
before the thirty-ninth session, ``compiled`` (an experiment) times reductions as Inductor
compiles them alone, from inside the model's own compile."""

from __future__ import annotations

import logging
import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from memopt import kernel_times as kt

CPU = torch.device("cpu")


def test_timing_is_queued_by_default_and_each_other_way_has_its_own_cache_file(
    monkeypatch, tmp_path
):
    """Read at each use; issued and compiled times never mix with queued ones."""
    monkeypatch.delenv(kt.TIMING_ENV, raising=False)
    queued = kt.cache_path(CPU, str(tmp_path))
    assert kt.timing_mode() == "queued" and kt.queued_timing()
    assert not any(way in os.path.basename(queued) for way in ("issued", "compiled"))
    monkeypatch.setenv(kt.TIMING_ENV, " Issued ")
    assert kt.timing_mode() == "issued" and not kt.queued_timing()
    assert kt.cache_path(CPU, str(tmp_path)) == queued.replace(".json", "-issued.json")
    monkeypatch.setenv(kt.TIMING_ENV, "compiled")
    assert kt.timing_mode() == "compiled" and kt.queued_timing()
    assert kt.cache_path(CPU, str(tmp_path)) == queued.replace(".json", "-compiled.json")
    monkeypatch.setenv(kt.TIMING_ENV, "queued")
    assert kt.cache_path(CPU, str(tmp_path)) == queued


def test_an_unknown_kernel_timing_is_said_once_and_timed_queued(monkeypatch, caplog):
    monkeypatch.setenv(kt.TIMING_ENV, "issue")
    with caplog.at_level(logging.WARNING, logger="memopt"):
        assert kt.timing_mode() == "queued" and kt.queued_timing()
    said = [r.getMessage() for r in caplog.records if kt.TIMING_ENV in r.getMessage()]
    assert said == [
        f"memopt: {kt.TIMING_ENV}='issue' is not one of queued, issued, compiled: kernels are "
        "timed queued"
    ]


def _one_op(fn, *shapes):
    """The one op ``fn`` traces to, its node with fake values (``shapes``: one per input)."""
    g = make_fx(fn, tracing_mode="fake")(*(torch.randn(*s) for s in shapes))
    return next(n for n in g.graph.nodes if n.op == "call_function")


def _spy_compiles(monkeypatch, compile_for_real: bool = True) -> list[str]:
    """The ops :func:`memopt._torch_compat.kernels.inductor_op` compiles from now on (without
    ``compile_for_real``, each is run by aten instead: only the choice is tested)."""
    from memopt._torch_compat import kernels

    compiled: list[str] = []
    real = kernels.inductor_op

    def spy(target, args, kwargs):
        fn = real(target, args, kwargs) if compile_for_real else lambda: target(*args, **kwargs)
        compiled.append(str(target))
        return fn

    monkeypatch.setattr(kernels, "inductor_op", spy)
    return compiled


def test_compiled_timing_runs_inductors_kernel_for_a_reduction_only(monkeypatch):
    """A LayerNorm's var_mean over rows of 96 (as ConvNeXt's) is timed as Inductor compiles it
    alone; a matmul stays aten's kernel."""
    compiled = _spy_compiles(monkeypatch, compile_for_real=False)
    monkeypatch.setenv(kt.TIMING_ENV, "compiled")
    var_mean = _one_op(lambda x: torch.var_mean(x, [1], correction=0, keepdim=True), (512, 96))
    mm = _one_op(torch.mm, (64, 96), (96, 32))
    assert kt.time_kernel(var_mean, CPU, int) > 0
    assert kt.time_kernel(mm, CPU, int) > 0
    assert compiled == ["aten.var_mean.correction"]


def test_a_reduction_inductor_cannot_compile_alone_is_timed_as_atens_kernel(monkeypatch):
    from memopt._torch_compat import kernels

    def fails(target, args, kwargs):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(kernels, "inductor_op", fails)
    monkeypatch.setenv(kt.TIMING_ENV, "compiled")
    assert kt.time_kernel(_one_op(lambda x: x.sum(1), (512, 96)), CPU, int) > 0


def test_compiled_timing_stops_compiling_when_its_seconds_are_spent(monkeypatch, caplog):
    """Past COMPILED_BUDGET_S of compiles a reduction is timed as aten's kernel, said once."""
    compiled = _spy_compiles(monkeypatch, compile_for_real=False)
    monkeypatch.setenv(kt.TIMING_ENV, "compiled")
    monkeypatch.setattr(kt, "_compiled_s", [0.0])
    monkeypatch.setattr(kt, "_noted", set())
    total = _one_op(lambda x: x.sum(1), (512, 96))
    assert kt.time_kernel(total, CPU, int) > 0 and len(compiled) == 1
    monkeypatch.setattr(kt, "_compiled_s", [kt.COMPILED_BUDGET_S])
    with caplog.at_level(logging.WARNING, logger="memopt"):
        for _ in range(2):
            assert kt.time_kernel(total, CPU, int) > 0
    assert len(compiled) == 1
    said = [r.getMessage() for r in caplog.records if "spent" in r.getMessage()]
    assert said == [
        "memopt kernel times: the 120 s for compiling reductions alone are spent; further "
        "reductions are timed as aten's kernels"
    ]


@pytest.mark.slow
def test_reductions_compiled_alone_inside_the_models_compile_leave_it_intact(monkeypatch, tmp_path):
    """Kernels are timed from the partitioner, inside the model's compile. Compiled there on
    the same thread, a reduction's inputs became symbols of the model's shape env, and the
    model's compile failed building its guards: an IndexError on an H200 with torch 2.11
    (ConvNeXt, Mistral); here, on this model, "sources must not be empty for symbol" (the
    bias gradients' sums over three dims). Compiled on a thread of its own, the model trains
    with torch.compile's gradients. The CPU stands in for CUDA: the timing pass is let run."""
    import memopt
    import memopt.passes.pipeline as pipeline

    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(kt.TIMING_ENV, "compiled")
    monkeypatch.setattr(pipeline, "TIMED_DEVICES", frozenset({"cuda", "cpu"}))
    monkeypatch.setattr(pipeline, "measure_room", lambda *a, **k: None)
    compiled = _spy_compiles(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(96, 192), torch.nn.LayerNorm(192), torch.nn.GELU(), torch.nn.Linear(192, 8)
    )
    ref = torch.nn.Sequential(*(m for m in model))  # the same modules, compiled plainly below
    x = torch.randn(8, 14, 14, 96)
    torch.compile(ref)(x).square().mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    memopt.optimize(model, budget=0.5)(x).square().mean().backward()
    assert compiled, "no reduction was compiled alone"
    assert "aten.var_mean.correction" in compiled
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, w)
    cache = tmp_path / "rates" / os.path.basename(kt.cache_path(CPU, "."))
    assert cache.name.endswith("-compiled.json") and cache.exists()
