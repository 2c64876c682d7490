"""Device rates: documented defaults, calibration and its cache (no GPU needed)."""

from __future__ import annotations

import json

import pytest
import torch

from memopt import timing_lock
from memopt.planner import costs
from memopt.planner.costs import (
    CPU_DEFAULTS,
    H100_DEFAULTS,
    CalibrationSizes,
    DeviceRates,
    calibrate,
)

FAKE = DeviceRates(
    name="cuda",
    matmul_flops_per_s=1e14,
    hbm_bytes_per_s=2e12,
    h2d_bytes_per_s=2e10,
    d2h_bytes_per_s=3e10,
    source="measured",
)


def _cached(where):
    """The files a calibration cached under ``where`` (not the measuring lock's file)."""
    return [p for p in where.iterdir() if p.name != timing_lock.NAME]


def test_defaults_are_documented_round_numbers() -> None:
    assert CPU_DEFAULTS.matmul_flops_per_s == 100e9 and CPU_DEFAULTS.hbm_bytes_per_s == 10e9
    assert H100_DEFAULTS.matmul_flops_per_s == 600e12 and H100_DEFAULTS.d2h_bytes_per_s == 50e9
    assert (H100_DEFAULTS.run_offload_s, H100_DEFAULTS.run_offload_tensor_s) == (
        costs.RUN_OFFLOAD_S,
        costs.RUN_OFFLOAD_TENSOR_S,
    )
    assert CPU_DEFAULTS.run_offload_s == CPU_DEFAULTS.run_offload_tensor_s == 0


def test_cpu_uses_defaults_without_measuring(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(costs, "_measure", lambda *a: pytest.fail("measured on CPU"))
    assert calibrate("cpu", tmp_path) is CPU_DEFAULTS
    assert _cached(tmp_path) == []


def test_measured_once_then_cached(monkeypatch, tmp_path) -> None:
    calls = []
    monkeypatch.setattr(costs, "_device_name", lambda dev: "Fake GPU 80GB")
    monkeypatch.setattr(costs, "_measure", lambda dev, sizes: calls.append(dev) or FAKE)
    first = calibrate("cuda", tmp_path)
    assert first.source == "measured" and first.name == "Fake GPU 80GB"
    assert first.d2h_bytes_per_s == 3e10
    (path,) = _cached(tmp_path)
    assert path.name.startswith("rates-Fake-GPU-80GB-torch")
    assert json.loads(path.read_text())["version"] == costs.CALIBRATION_VERSION
    second = calibrate("cuda", tmp_path)
    assert len(calls) == 1
    assert second.source == f"cache:{path}"
    assert (second.matmul_flops_per_s, second.h2d_bytes_per_s) == (1e14, 2e10)
    calibrate("cuda", tmp_path, refresh=True)
    assert len(calls) == 2
    # A cache from another calibration version is measured again.
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "version": -1}))
    calibrate("cuda", tmp_path)
    assert len(calls) == 3


def test_no_cache_dir_measures_every_time(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(costs, "_device_name", lambda dev: "Fake GPU")
    monkeypatch.setattr(costs, "_measure", lambda dev, sizes: calls.append(1) or FAKE)
    calibrate("cuda")
    calibrate("cuda")
    assert len(calls) == 2


def test_measure_runs_on_cpu() -> None:
    rates = costs._measure(torch.device("cpu"), CalibrationSizes(64, 1 << 16, 1 << 16, 2))
    assert rates.matmul_flops_per_s > 0 and rates.hbm_bytes_per_s > 0
    assert rates.h2d_bytes_per_s > 0 and rates.d2h_bytes_per_s > 0


def test_measure_times_real_tensors_inside_a_compiles_fake_mode(monkeypatch) -> None:
    """The planner calibrates from the partitioner, inside the compile's FakeTensorMode: there
    ``torch.randn`` makes fake tensors, every timing is ~0 and the rates are absurd (seen on
    an H100: a 55 ms step predicted at 15 ms, so offload looked free)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    made = []
    real_mm = costs._time_matmul

    def spy(dev, n, dtype, sync, repeats, inner=1):
        made.append(torch.randn(2, device=dev))
        return real_mm(dev, n, dtype, sync, repeats, inner)

    monkeypatch.setattr(costs, "_time_matmul", spy)
    with FakeTensorMode():
        rates = costs._measure(torch.device("cpu"), CalibrationSizes(64, 1 << 16, 1 << 16, 2))
    assert made and not isinstance(made[0], FakeTensor)
    assert costs.check_rates(rates) == ""


def test_run_offload_is_timed_outside_the_partitioners_thread_local_state(monkeypatch) -> None:
    """Cross-region offload's host time is calibrated from the partitioner, which traces under
    a fake-tensor mode, without grad and with saved-tensor hooks disabled: the run it times
    must still pack real tensors and offload them (else the offloaded-less-kept time is 0)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memopt.offload import step_offload

    moved = []
    real_offload = step_offload.StepOffload._offload

    def spy(self, pos, group):
        moved.append(len(group))
        return real_offload(self, pos, group)

    monkeypatch.setattr(step_offload.StepOffload, "_offload", spy)
    with (
        FakeTensorMode(),
        torch.no_grad(),
        torch.autograd.graph.disable_saved_tensors_hooks("traced"),
    ):
        run_s, tensor_s = costs._time_run_offload(torch.device("cpu"), lambda: None, 1, (2, 6))
    # per count: 2 warm-ups and 5 samples offloaded, each run its tensors (not w)
    assert moved == [2] * 7 + [6] * 7
    assert run_s >= 0 and tensor_s >= 0 and run_s + tensor_s > 0
    fitted = costs.replace(FAKE, run_offload_s=run_s, run_offload_tensor_s=tensor_s)
    assert costs.check_rates(fitted) == ""


def test_implausible_rates_are_named_and_not_read_from_the_cache(monkeypatch, tmp_path) -> None:
    bad = costs.replace(FAKE, matmul_flops_per_s=1e19)
    assert costs.check_rates(bad).startswith("matmul_flops_per_s=1e+19")
    assert costs.check_rates(FAKE) == ""
    monkeypatch.setattr(costs, "_device_name", lambda dev: "Fake GPU")
    monkeypatch.setattr(costs, "_measure", lambda dev, sizes: bad)
    with pytest.raises(RuntimeError, match="device calibration on Fake GPU measured matmul"):
        calibrate("cuda", tmp_path)
    path = tmp_path / "rates-old.json"
    data = {k: v for k, v in costs.asdict(bad).items() if k != "source"}
    path.write_text(json.dumps({**data, "version": costs.CALIBRATION_VERSION}))
    assert costs._read_cache(str(path)) is None


def test_allocator_note_only_for_absolute_cuda_budgets_without_expandable_segments():
    from memopt.passes.plan_budget import allocator_note

    assert allocator_note("cpu", 10 << 30, {}) is None
    assert allocator_note("cuda", 0.5, {}) is None  # a fraction scales with the model
    msg = allocator_note("cuda", 10 << 30, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    assert msg is not None and "expandable_segments:True" in msg
    ok = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128, expandable_segments:True"}
    assert allocator_note("cuda", 10 << 30, ok) is None


def test_calibration_sizes_shrink_to_the_room_and_repeat_each_run() -> None:
    """The full measurement holds 2 GiB (a 1 GiB copy's source and destination); in 600 MiB
    it copies 256 MiB four times per sample, multiplies 4096-squared matrices and transfers
    64 MiB; below the smallest measurement (256 MiB) nothing fits."""
    full = CalibrationSizes()
    assert full.device_bytes() == 2 << 30 and full.within(2 << 30) is full
    fitted = full.within(600 << 20)
    assert (fitted.copy_bytes, fitted.matmul_n, fitted.transfer_bytes, fitted.inner) == (
        256 << 20, 4096, 64 << 20, 4,
    )  # fmt: skip
    assert fitted.device_bytes() == 512 << 20
    assert costs.SMALLEST.device_bytes() == 256 << 20
    assert full.within(256 << 20).copy_bytes == 128 << 20 and full.within(255 << 20) is None


def test_calibration_without_room_plans_with_nominal_rates_and_caches_nothing(
    monkeypatch, tmp_path, caplog
) -> None:
    """Inside a step under a byte budget: sizes that fit the room are measured; where nothing
    fits, the nominal H100 rates, no cache file, and one warning that names the room."""
    got = []
    monkeypatch.setattr(costs, "_device_name", lambda dev: "Fake GPU")
    monkeypatch.setattr(costs, "_measure", lambda dev, sizes: got.append(sizes) or FAKE)
    monkeypatch.setattr(costs, "_unmeasured", {})
    with caplog.at_level("WARNING", logger="memopt"):
        rates = calibrate("cuda", tmp_path, room=100 << 20)
        # the rest of the process plans on the same rates, even with room later
        assert calibrate("cuda", tmp_path, room=600 << 20) is rates
    assert got == [] and _cached(tmp_path) == []
    assert rates.matmul_flops_per_s == H100_DEFAULTS.matmul_flops_per_s
    assert rates.name == "h100-default (Fake GPU not measured)" and rates.source == "default"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "Fake GPU could not be calibrated (100 MiB of room;" in warning
    assert "needs 256 MiB" in warning
    monkeypatch.setattr(costs, "_unmeasured", {})  # a new process
    calibrate("cuda", tmp_path, room=600 << 20)
    assert [s.copy_bytes for s in got] == [256 << 20] and len(_cached(tmp_path)) == 1
    # a function for the room is asked only when measuring: not on a cache hit
    assert calibrate("cuda", tmp_path, room=lambda: pytest.fail("asked")).source.startswith("cache")


def test_a_short_sample_is_repeated_inside_one_timing() -> None:
    calls = []
    assert costs._time(lambda: calls.append(1), lambda: None, repeats=3, inner=4) > 0
    assert len(calls) == 1 + 3 * 4


def test_a_calibration_out_of_memory_plans_on_nominal_rates(monkeypatch, tmp_path) -> None:
    """Free memory in the allocator's cache can be too fragmented for the measurement's
    blocks: out of memory there is not an error of the compile."""
    monkeypatch.setattr(costs, "_device_name", lambda dev: "Fake GPU")
    monkeypatch.setattr(costs, "_unmeasured", {})

    def oom(dev, sizes):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(costs, "_measure", oom)
    rates = calibrate("cuda", tmp_path, room=1 << 30)
    assert rates.name == "h100-default (Fake GPU not measured)"
    assert _cached(tmp_path) == []
    monkeypatch.setattr(costs, "_measure", lambda dev, sizes: pytest.fail("measured twice"))
    assert calibrate("cuda", tmp_path, room=1 << 30) is rates
