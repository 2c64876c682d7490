"""benchmarks/multi_gpu.py: its steps mode at world size 2 on the CPU (gloo, a tiny Llama,
torchrun with two processes, started when collection ends: tests/early.py) and its markdown
tables from hand-made JSON."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from tests import early

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "multi_gpu.py")
_spec = importlib.util.spec_from_file_location("multi_gpu_script", _PATH)
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)

GiB = 2**30


def _steps_job(tmp: Path) -> tuple[list[str], dict[str, str]]:
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
        "MEMOPT_CACHE_DIR": str(tmp / "memopt"),
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--standalone", _PATH, "steps", "--device", "cpu"]
    cmd += ["--tiny", "--only", "level", "--out", str(tmp / "steps.json")]
    return cmd, env


JOB = ("multi_gpu_steps", _steps_job, 1800)  # ~95 s alone; 3x that beside the suite


def start_early(items) -> None:
    """torchrun starts when collection ends and overlaps the suite (tests/early.py)."""
    if early.selected(items, __name__, "test_steps_world_size_2_on_cpu"):
        early.submit(*JOB)


@pytest.mark.slow
def test_steps_world_size_2_on_cpu():
    p = early.result(*JOB)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    d = json.loads((p.tmp / "steps.json").read_text())
    assert d["world"] == 2 and d["global_batch"] == 4
    rows = {r["key"]: r for r in d["rows"]}
    # torch.compile is timed again after the others (the first row runs colder)
    assert list(rows) == ["compile", "level1", "compile_end"]
    assert rows["compile_end"]["losses"] == rows["compile"]["losses"]
    assert not any("error" in r for r in rows.values())
    ref, opt = rows["compile"], rows["level1"]
    assert len(ref["losses"]) == 3 and len(opt["losses"]) == 3
    assert max(abs(a - b) for a, b in zip(ref["losses"], opt["losses"])) < 1e-4
    assert len(ref["losses_by_rank"]) == 2  # the ranks' batches differ, their mean is recorded
    assert ref["losses_by_rank"][0] != ref["losses_by_rank"][1]
    assert opt["same_plan_on_ranks"] is True and len(opt["plan_fingerprints"]) == 2
    assert len(opt["memopt"]) == 2 and opt["memopt"][0]["regions"] >= 1
    assert ref["peaks"] == [0, 0] and len(ref["step_ms"]) == 2


def _steps(world, batch, rows):
    return {
        "world": world,
        "torch": "2.11",
        "device": "H100",
        "date": "today",
        "global_batch": world * batch,
        "config": {"batch": batch, "seq": 2048},
        "rows": rows,
    }


def _row(key, variant, ms, tok, peak, losses, **kw):
    return dict(key=key, variant=variant, ms=ms, tokens_per_s=tok, peak=peak, losses=losses, **kw)


def test_tables_from_hand_made_json(tmp_path):
    w2 = _steps(
        2,
        4,
        [
            _row("compile", "torch.compile", 100.0, 4000.0, 2 * GiB, [10.5, 8.25]),
            _row("level1", "memopt level=1", 110.0, 3636.0, GiB, [10.5, 8.0], same_plan_on_ranks=True),
            {"key": "offload1", "variant": "memopt offload_layers=1", "error": "OOM"},
        ],
    )  # fmt: skip
    w1 = _steps(1, 4, [_row("compile", "torch.compile", 90.0, 2000.0, 3 * GiB, [1.0])])
    c = _steps(1, 8, [_row("level1", "memopt level=1", 1, 1, 1, [10.5, 8.125])])
    rank = {"VmHWM": 4 * GiB, "host_pinned_bytes": GiB, "host_pageable_bytes": 2 * GiB}
    job = {
        "name": "memopt",
        "bs": 2,
        "seq": 512,
        "world": 2,
        "s_per_step": 0.5,
        "tokens_per_s": 4096.0,
        "peak_gib": 1.5,
        "ranks": [rank, {**rank, "host_pinned_bytes": 3 * GiB}],
        "host_pinned_bytes_sum": 4 * GiB,
        "host_pageable_bytes_sum": 4 * GiB,
    }
    params = {"device": "H100", "torch": "2.11", "world": 2, "date": "today"}
    params["config"] = {"cap_gib": 3.5}
    p2 = {**params, "results": [job, {"name": "fsdp2", "bs": 8, "seq": 1024, "error": "OOM"}]}
    one = {**job, "world": 1, "tokens_per_s": 2048.0, "host_pageable_bytes_sum": 3 * GiB}
    p1 = {**params, "world": 1, "results": [one]}
    paths = {}
    for name, d in dict(w2=w2, w1=w1, c=c, p2=p2, p1=p1).items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(d))
    ns = mg.argparse.Namespace(
        steps_json=paths["w2"],
        steps_json_1gpu=paths["w1"],
        loss_json_1gpu=paths["c"],
        params_json=paths["p2"],
        params_json_1gpu=paths["p1"],
    )
    lines = mg.table(ns).splitlines()
    assert "| torch.compile | 100.0 | +0.0% | 4,000 | 2.00 |  | 2.00x | 10.5000, 8.2500 |" in lines
    assert "| memopt level=1 | 110.0 | +10.0% | 3,636 | 1.00 | yes |  | 10.5000, 8.0000 |" in lines
    assert "| memopt offload_layers=1 | failed: OOM | | | | | | |" in lines
    assert "| memopt level=1 | 10.5000, 8.0000 | 10.5000, 8.1250 | 0.12 |" in lines
    assert not any(ln.startswith("| torch.compile | 10.5") for ln in lines)  # not in C
    assert (
        "| memopt | 2 × 512 | 0.500 | 4,096 | 2.00x | 1.50 | 4.00 / 4.00 | 1.00 / 3.00 | "
        "2.00 / 2.00 | 8.00 | 7.00 |" in lines
    )
    assert "| fsdp2 | 8 × 1024 | out of memory |" + " |" * 8 in lines
