"""memopt.plot: snapshot curves and Pareto groups (exact), PNGs drawn, clear errors."""

from __future__ import annotations

import json
import os
import pickle
import sys

import pytest

from memopt.plot import PlotError, main, pareto_groups, plot_step, pyplot, snapshot_curve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 2**20


def synthetic_snapshot() -> dict:
    """torch.cuda.memory._snapshot() format: 1 MiB allocated before the trace (still live at
    the end), then alloc 4, alloc 2, free 4, alloc 8, free 2, free 8 (MiB), 0.5 ms apart."""
    events, t = [], 1000
    for action, size in [
        ("alloc", 4),
        ("alloc", 2),
        ("free_requested", 4),  # not a change of allocated bytes
        ("free_completed", 4),
        ("alloc", 8),
        ("free_completed", 2),
        ("free_completed", 8),
    ]:
        events.append({"action": action, "addr": t, "size": size * MIB, "time_us": t})
        t += 500
    blocks = [
        {"size": MIB, "state": "active_allocated", "address": 0},
        {"size": 31 * MIB, "state": "inactive", "address": MIB},
    ]
    segment = {"device": 0, "address": 0, "total_size": 32 * MIB, "blocks": blocks}
    return {"segments": [segment], "device_traces": [events]}


def test_snapshot_curve_recovers_the_bytes_before_the_trace():
    times, curve = snapshot_curve(synthetic_snapshot())
    assert times == [0.0, 0.0, 0.5, 1.5, 2.0, 2.5, 3.0]
    assert [c // MIB for c in curve] == [1, 5, 7, 3, 11, 9, 1]


def test_snapshot_curve_refuses_other_data():
    with pytest.raises(PlotError, match="not a CUDA memory snapshot"):
        snapshot_curve({"segments": []})
    with pytest.raises(PlotError, match="no alloc/free events"):
        snapshot_curve({"segments": [], "device_traces": [[]]})


def test_pareto_groups_from_the_llama_benchmark():
    with open(os.path.join(ROOT, "docs", "data", "pareto_llama_v7.json")) as f:
        groups = pareto_groups(json.load(f))
    assert sorted(groups) == ["memopt", "other", "torch.compile"]
    assert [label for _, _, label in groups["other"]] == [
        "eager + per-layer checkpointing",
        "eager",
    ]
    peak, ms, label = groups["memopt"][0]  # smallest peak first
    assert (label, round(peak, 3), round(ms, 1)) == ("level=1", 3.513, 64.7)
    assert [p for p, _, _ in groups["torch.compile"]] == sorted(
        p for p, _, _ in groups["torch.compile"]
    )


def _timeline() -> dict:
    base = [10 * MIB, 30 * MIB, 50 * MIB, 40 * MIB, 20 * MIB, 10 * MIB]
    planned = [10 * MIB, 20 * MIB, 25 * MIB, 30 * MIB, 20 * MIB, 10 * MIB]
    return {
        "label": "toy",
        "positions": 6,
        "n_fwd": 3,
        "baseline": base,
        "planned": planned,
        "baseline_peak": 50 * MIB,
        "baseline_peak_pos": 2,
        "planned_peak": 30 * MIB,
        "planned_peak_pos": 3,
        "layer_fwd_start": [1],
        "layer_bwd_start": [4],
    }


def _is_png(path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_step_picture_with_a_measured_panel(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "step.png"
    plot_step(_timeline(), str(out), synthetic_snapshot())
    assert _is_png(out)


def test_cli_pictures(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    report, snap = tmp_path / "r.json", tmp_path / "s.pickle"
    report.write_text(json.dumps({"report": {}, "timeline": _timeline()}))
    snap.write_bytes(pickle.dumps(synthetic_snapshot()))
    data = os.path.join(ROOT, "docs", "data", "pareto_llama_v7.json")
    for argv in (
        ["step", str(report), "--snapshot", str(snap), "-o", str(tmp_path / "a.png")],
        ["snapshot", str(snap), "-o", str(tmp_path / "b.png")],
        ["pareto", data, data, "-o", str(tmp_path / "c.png")],
    ):
        assert main(argv) == 0, capsys.readouterr().err
    assert all(_is_png(tmp_path / n) for n in ("a.png", "b.png", "c.png"))


def test_cli_errors_say_what_to_do(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"report": {}}))
    assert main(["step", str(report)]) == 2
    assert "memopt plan MODEL --timeline --save-report" in capsys.readouterr().err
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a pickle")
    assert main(["snapshot", str(bad)]) == 2
    assert "is not a pickled memory snapshot" in capsys.readouterr().err


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(PlotError, match=r"pip install memopt\[plot\]"):
        pyplot()
