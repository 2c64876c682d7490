"""The offload window check on plain numbers (memopt.offload.window)."""

from __future__ import annotations

import pytest

from memopt.offload.window import OffloadWindow

GB = 1e9


def test_copies_that_fit_the_step_say_nothing():
    w = OffloadWindow(int(1.0 * GB), 2, 0.020, 0.040, 50 * GB, 50 * GB)
    assert w.copy_s == pytest.approx(0.040) and w.exposed_s == 0.0
    assert w.fitting_layers() == 2 and w.note() is None


def test_copies_over_the_window_warn_with_the_fitting_layer_count():
    # 4 layers, 2.2 GB each way: 88 ms of copies against 10 + 20 ms of compute
    w = OffloadWindow(int(2.2 * GB), 4, 0.010, 0.020, 50 * GB, 50 * GB)
    assert w.copy_s == pytest.approx(0.088) and w.exposed_s == pytest.approx(0.058)
    assert w.fitting_layers() == 1  # 22 ms per layer, 30 ms of compute
    assert w.note() == (
        "the copies cannot hide: 2.20 GB each way take 88.0 ms on one copy stream (D2H 50 GB/s, "
        "H2D 50 GB/s) against 10.0 ms forward + 20.0 ms backward predicted; expect at least "
        "58.0 ms more per step; about 1 layer(s) would fit (offload_layers=1)"
    )
    tiny = OffloadWindow(int(2.2 * GB), 4, 0.001, 0.002, 50 * GB, 50 * GB)
    assert tiny.fitting_layers() == 0 and tiny.note().endswith("not one layer's copies fit")


def test_the_note_reaches_the_report(monkeypatch, caplog):
    """Wiring on the CPU: the pipeline's compute-seconds probe (CUDA only) stands in with
    tiny times, so the offload of two layers cannot hide and the report says so."""
    import logging

    import torch

    import memopt
    import memopt.passes.pipeline as pipeline
    from memopt.planner.costs import H100_DEFAULTS
    from tests.helpers import MLP

    monkeypatch.setattr(pipeline, "_compute_seconds", lambda r: (1e-9, 2e-9, H100_DEFAULTS))
    torch.manual_seed(0)
    model = MLP(n=3)
    with caplog.at_level(logging.WARNING, logger="memopt"):
        opt = memopt.optimize(model, offload_layers=2, offload_min_bytes=0)
        opt(torch.randn(8, 64)).sum().backward()
    assert "the copies cannot hide" in memopt.report(opt).table()
    assert any("the copies cannot hide" in r.getMessage() for r in caplog.records)


def test_the_compute_seconds_probe_runs_on_the_graphs(monkeypatch):
    """The probe itself (CUDA only; here the device is said to be one): forward and backward
    seconds over the graphs' ops, a measured kernel time where the table has one. It once
    failed on every graph (``find_nodes`` without a target) and the window note never came."""
    import torch

    import memopt
    import memopt.passes.pipeline as pipeline
    import memopt.passes.plan_budget as plan_budget
    from memopt.planner.costs import H100_DEFAULTS
    from tests.helpers import MLP

    seen = []
    real = pipeline._compute_seconds

    def probe(r):
        out = real(r)
        seen.append((out, r))
        return out

    monkeypatch.setattr(pipeline, "_device", lambda inputs: torch.device("cuda"))
    monkeypatch.setattr(plan_budget, "device_rates", lambda device, budget=None: H100_DEFAULTS)
    monkeypatch.setattr(pipeline, "measure_room", lambda device, budget=None: 1 << 40)
    monkeypatch.setattr(pipeline.kernel_times, "measure", lambda *a, **kw: {})
    monkeypatch.setattr(pipeline, "_compute_seconds", probe)
    torch.manual_seed(0)
    opt = memopt.optimize(MLP(n=3), offload_layers=2, offload_min_bytes=0)
    opt(torch.randn(8, 64)).sum().backward()
    (fwd_s, bwd_s, rates), region = seen[0]
    assert fwd_s > 0 and bwd_s > 0 and rates is H100_DEFAULTS
    # a measured kernel replaces its roofline time: one mm of the forward at 1 s
    region.kernels = {}
    fwd0, bwd0, _ = real(region)  # the graphs as rewritten (the probe saw them before)
    mm = next(n for n in region.fw.graph.nodes if "mm" in str(n.target))
    value = pipeline._value(region)
    region.kernels = {pipeline.kernel_times.signature(mm, value): 1.0}
    fwd2, bwd2, _ = real(region)
    assert fwd2 > 1.0 > fwd0 and bwd2 == bwd0
