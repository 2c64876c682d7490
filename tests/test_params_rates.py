"""Host rates for the automatic placement: measured once per host and device, cached."""

from __future__ import annotations

import json
import math

import pytest

import memopt
from memopt.params import rates as R
from tests.helpers import tiny_llama


def test_host_rates_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(R, "_MEMO", {})
    calls = []

    def fake(device):
        calls.append(device)
        return R.HostRates(80e9, 50e9, 40e9, "measured")

    monkeypatch.setattr(R, "measure_host_rates", fake)
    first = R.host_rates("cpu")
    assert first == R.HostRates(80e9, 50e9, 40e9, "measured") and len(calls) == 1
    assert R.host_rates("cpu") is R._MEMO[R._key(calls[0])]  # same process: no new measure
    stored = json.loads((tmp_path / "host_rates.json").read_text())
    assert list(stored.values()) == [
        {"adam_Bps": 80e9, "h2d_Bps": 50e9, "d2h_Bps": 40e9, "source": "measured"}
    ]
    monkeypatch.setattr(R, "_MEMO", {})  # a new process: the file answers
    again = R.host_rates("cpu")
    assert len(calls) == 1 and again.adam_Bps == 80e9 and again.d2h_Bps == 40e9
    assert again.source == f"cache {tmp_path / 'host_rates.json'}"


def test_measure_host_rates_on_cpu_has_no_copies():
    r = R.measure_host_rates("cpu", nbytes=1 << 20, reps=1)
    assert r.adam_Bps > 0 and r.h2d_Bps == math.inf and r.d2h_Bps == math.inf
    assert r.to_dict()["h2d_Bps"] is None and R.HostRates.from_dict(r.to_dict(), "x").h2d_Bps == (
        math.inf
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, r"param_offload=1.5 must be a number in \[0, 1\]"),
        (-1, r"param_offload=-1 must be a number in \[0, 1\]"),
        (True, "param_offload=True is not a parameter offload setting"),
        ("fast", "param_offload='fast' is not a budget"),
        ("0GiB", "must be at least one byte"),
        ([0.5], r"param_offload=\[0.5\] is not a parameter offload setting"),
    ],
)
def test_param_offload_bad_values_are_config_errors(value, message):
    with pytest.raises(memopt.ConfigError, match=message):
        memopt.optimize(tiny_llama(), param_offload=value)


def test_param_offload_values_resolved():
    from memopt.config import resolve_config

    assert resolve_config(param_offload=0.5).param_offload == 0.5
    assert resolve_config(param_offload=1).param_offload == 1.0  # a share, not one byte
    assert resolve_config(param_offload="AUTO").param_offload == "auto"
    assert resolve_config(param_offload="8GiB").param_offload == 8 * 2**30
    assert resolve_config(param_offload=4096).param_offload == 4096
