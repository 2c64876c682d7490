"""PyTorch's native activation offload as a peer in the GPU zoo (benchmarks/native_offload.py,
benchmarks/zoo_gpu.py, benchmarks/zoo_gpu_report.py), on the CPU: the tagging pass tags what
it should, the report's dominance cells, memopt's budgets queued at each peer's peak, and (slow)
a whole zoo_gpu run with the peers (started when collection ends: tests/early.py)."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import pytest
import torch
import torch._functorch.config as fconfig
import torch.nn as nn

from benchmarks.native_offload import NativeOffload, first_half_layers, layer_paths, tag_pass
from benchmarks.zoo_gpu import PEERS, Runner, _variants
from benchmarks.zoo_gpu_report import (
    LOSS_RTOL,
    PEER_LABELS,
    brief_error,
    compare,
    dominance_cell,
    markdown,
    peer_summary,
    peer_table,
    went_back,
)
from memopt import _torch_compat as compat
from tests import early

ROOT = Path(__file__).resolve().parents[1]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 128)
        self.down = nn.Linear(128, 32)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x.pow(2).mean()


def _net():
    torch.manual_seed(0)
    return Net(), torch.randn(8, 32)


def test_tag_pass_tags_each_layers_hidden_tensors():
    """Per block, at 8 x 32 floats in: the up-projection and its ReLU are 8 x 128 floats
    (4096 bytes) each; the down-projection's 8 x 32 (1024 bytes) and the weights' transposes
    (views) are not tagged, nor anything in backward."""
    model, x = _net()
    tagged = []
    ours = tag_pass(min_bytes=4096)

    def joint_pass(gm, inputs):
        gm = ours(gm, inputs)
        tagged.extend(str(n.target) for n in gm.graph.nodes if n.meta.get("should_offload"))
        return gm

    with compat.no_compile_caches(), fconfig.patch(joint_custom_pass=joint_pass):
        torch.compile(model)(x).backward()
    assert tagged == ["aten.addmm.default", "aten.relu.default"] * 4
    c = ours.counts
    assert (c.graphs, c.tagged, c.tagged_bytes) == (1, 8, 8 * 4096)


@pytest.mark.parametrize("half", [False, True])
def test_native_offload_offloads_the_saved_relus_and_trains_like_eager(half):
    """The partitioner saves each block's ReLU output (the up-projection before it is not
    needed in backward): those are offloaded, in every layer or in layers 0 and 1."""
    model, x = _net()
    model(x).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    assert layer_paths(model) == ["layers.0", "layers.1", "layers.2", "layers.3"]
    layers = first_half_layers(model) if half else None
    with compat.no_compile_caches(), NativeOffload(min_bytes=4096, layers=layers) as native:
        assert fconfig.enable_activation_offloading and callable(fconfig.joint_custom_pass)
        torch.compile(model)(x).backward()
    assert not fconfig.enable_activation_offloading and fconfig.joint_custom_pass is None
    for w, p in zip(want, model.parameters()):
        torch.testing.assert_close(p.grad, w)
    n = 2 if half else 4
    facts = native.facts()
    assert {k: facts[k] for k in ("graphs", "partitions", "layers", "min_bytes")} == {
        "graphs": 1,
        "partitions": 1,
        "layers": ["layers.0", "layers.1"] if half else [],
        "min_bytes": 4096,
    }
    assert (facts["tagged"], facts["tagged_bytes"]) == (2 * n, 2 * n * 4096)
    assert (facts["offloaded"], facts["offloaded_bytes"]) == (n, n * 4096)
    assert facts["flags"] == {
        "enable_activation_offloading": True,
        "activation_offload_separate_stream": False,
        "activation_offload_sink_wait": False,
        "activation_reload_prefetch": False,
    }


def test_titan_flags_set_the_memory_budget_and_restore_it():
    with NativeOffload(memory_budget=0.5, separate_stream=True, prefetch=True) as native:
        assert fconfig.activation_memory_budget == 0.5
        assert fconfig.activation_offload_separate_stream and fconfig.activation_reload_prefetch
        assert not fconfig.activation_offload_sink_wait
    assert fconfig.activation_memory_budget == 1.0
    assert not fconfig.activation_offload_separate_stream
    assert native.facts()["flags"]["activation_memory_budget"] == 0.5


# --- the report -----------------------------------------------------------------------------

GIB = 2**30


def _row(variant, kind, ms, peak, **extra):
    return {"variant": variant, "label": variant, "kind": kind, "ms": ms, "peak": peak,
            "loss": 2.0, "compile_s": 1.0, "unit": "samples", "per_s": 1.0, **extra}  # fmt: skip


def _budget(at, ms, peak):
    return _row(f"memopt budget at {at}", "budget", ms, peak, target=peak, at=at)


def _doc(rows):
    base = _row("torch.compile", "compile", 100.0, 8 * GIB)
    return {"model": "m", "device": "d", "torch": "t", "dtype": "bf16", "size": "gpu",
            "rows": [base, *rows]}  # fmt: skip


NATIVE = {"tagged": 10, "tagged_bytes": 2 * GIB, "offloaded": 4, "offloaded_bytes": GIB}
STREAM_ERROR = (
    "BackendCompilerFailed: TypeError: _() missing 1 required positional argument: "
    "'to_dealloc'\n  File x.py, line 3"
)


def _peer_doc():
    return _doc(
        [
            _row("native offload", "native", 150.0, 4 * GIB, min_bytes=2**20, native=NATIVE),
            {
                "variant": "native offload, stream",
                "label": "native offload, stream",
                "kind": "native_stream",
                "min_bytes": 2**20,
                "error": STREAM_ERROR,
            },
            _row("checkpoint+offload", "titan", 120.0, 4 * GIB, native=NATIVE),
            _budget("native offload", 110.0, int(4.01 * GIB)),  # within 0.5%, faster
            _budget("checkpoint+offload", 125.0, 3 * GIB),  # lower peak, slower
        ]
    )


def test_dominance_cells():
    assert dominance_cell(None) == "-"
    assert dominance_cell({"peak": True, "time": True}) == "yes"
    assert dominance_cell({"peak": False, "time": True}) == "**no** (peak)"
    assert dominance_cell({"peak": False, "time": False}) == "**no** (peak, time)"
    peers = compare(_peer_doc())["peers"]
    assert [q["peer"]["kind"] for q in peers] == ["native", "native_stream", "titan"]
    assert [q["dominates"] for q in peers] == [
        {"peak": True, "time": True},
        None,
        {"peak": True, "time": False},
    ]
    assert peer_table(peers)[2:] == [
        "| native offload | 4.00 | +50.0% | 10 (2.00) / 4 (1.00) | 4.01 | +10.0% | yes "
        "| close / close |",
        "| native offload, stream | failed: `BackendCompilerFailed: TypeError: _() missing 1 "
        "required positional argument: 'to_dealloc'` | | | | | | |",
        "| checkpoint+offload | 4.00 | +20.0% | 10 (2.00) / 4 (1.00) | 3.00 | +25.0% "
        "| **no** (time) | close / close |",
    ]
    assert peer_summary([_peer_doc(), _doc([])]).splitlines()[2:] == [
        "| m | yes | peer failed | **no** (time) |",
        "| m | - | - | - |",
    ]


def test_peer_rows_stay_out_of_the_torch_tables():
    doc = _peer_doc()
    c = compare(doc)
    assert c["points"] == [] and c["others"] == []
    text = markdown([doc])
    assert text.count("memopt dominates native offload |") == 1  # the summary, once
    without = markdown([_doc([])])
    assert "peer" not in without and "dominates" not in without


def test_brief_error_of_a_log_tail():
    tail = "exit 1 before a result:\nTraceback\n  File a.py\nRuntimeError: Accelerator expected"
    assert brief_error(tail) == "exit 1 before a result: RuntimeError: Accelerator expected"
    assert brief_error("BackendCompilerFailed: backend='inductor' raised:\nTypeError: x") == (
        "BackendCompilerFailed: backend='inductor' raised: TypeError: x"
    )


# --- the runner's queue ---------------------------------------------------------------------


def _runner(device="cuda", points=(0.5,), kinds=(), ab=""):
    r = Runner.__new__(Runner)
    r.args = argparse.Namespace(
        points=points,
        device=device,
        size="gpu",
        dtype="bfloat16",
        warmup=0,
        iters=1,
        kinds=set(kinds),
        ab=ab,
    )
    r.docs = {"m": {"rows": []}}
    r.queued = collections.defaultdict(set)
    r.todo = collections.deque()
    return r


def _queued(r):
    return [(s["label"], s["variant"]["target"], s["variant"]["at"]) for s in r.todo]


def test_budgets_are_queued_once_at_each_peer_and_torch_peak():
    r = _runner()
    rows = r.docs["m"]["rows"]
    rows.append(_row("native offload", "native", 150.0, 4 * GIB))
    r._queue_budgets("m")
    r._queue_budgets("m")
    assert _queued(r) == [("memopt budget at native offload", 4 * GIB, "native offload")]
    rows.append({"variant": "native offload, stream", "kind": "native_stream", "error": "x"})
    rows.append({**_row("torch budget=0.5", "torch", 120.0, 5 * GIB), "budget": 0.5})
    r._queue_budgets("m")
    rows.append(_row("checkpoint+offload", "titan", 120.0, 3 * GIB))
    r._queue_budgets("m")
    r._queue_budgets("m")
    assert _queued(r)[1:] == [
        ("memopt budget at torch 0.5", 5 * GIB, 0.5),
        ("memopt budget at checkpoint+offload", 3 * GIB, "checkpoint+offload"),
    ]
    assert r.docs["m"]["budgets_queued"] is True


def test_a_resumed_run_queues_the_ab_row_its_plain_row_lacks():
    """A run cut off after a budget row but before its A/B twin: resumed, only the twin is
    queued (the forty-second session's Swin row at 0.3 [compiled] was never run again)."""
    r = _runner(ab="compiled:MEMOPT_KERNEL_TIMING=compiled")
    rows = r.docs["m"]["rows"]
    rows.append({**_row("torch budget=0.5", "torch", 120.0, 5 * GIB), "budget": 0.5})
    rows.append(_row("memopt budget at torch 0.5", "budget", 110.0, 5 * GIB - 1))
    r._queue_budgets("m")
    r._queue_budgets("m")
    assert _queued(r) == [("memopt budget at torch 0.5 [compiled]", 5 * GIB, 0.5)]


def test_on_the_cpu_a_peer_budget_is_a_fraction():
    r = _runner(device="cpu", points=(0.5, 0.3))
    r.docs["m"]["rows"].append(_row("checkpoint+offload", "titan", 1.0, None))
    r._queue_budgets("m")
    assert _queued(r) == [("memopt budget at checkpoint+offload", 0.5, "checkpoint+offload")]
    assert "budgets_queued" not in r.docs["m"]  # one torch point of two has no row yet


def test_variants_with_and_without_peers():
    labels = [v["label"] for v in _variants((0.5,), peers=True, min_bytes=7)]
    assert labels[-3:] == ["native offload", "native offload, stream", "checkpoint+offload"]
    assert [v["kind"] for v in _variants((0.5,), min_bytes=7)[-3:]] == list(PEERS)
    assert {v.get("min_bytes") for v in _variants((0.5,), min_bytes=7)[-3:]} == {7}
    assert len(_variants((0.5,), peers=False)) == len(labels) - 3


# --- a whole run on the CPU -----------------------------------------------------------------


def _peers_job(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Only the kinds the checks read run (torch budgets, memopt level 1 and half-layer offload
    would add rows nothing here looks at)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "zoo_gpu.py"), "--models", "vit"]
    cmd += ["--device", "cpu", "--size", "tiny", "--out", str(tmp / "out"), "--parallel", "2"]
    cmd += ["--iters", "1", "--warmup", "0", "--points", "0.5", "--peer-min-bytes", "16384"]
    cmd += ["--kinds", "compile,native,native_stream,titan,budget"]
    cmd += ["--logs", str(tmp / "logs")]
    return cmd, {}


JOB = ("zoo_gpu_peers", _peers_job, 1800)


def start_early(items) -> None:
    """The run starts when collection ends and overlaps the suite (tests/early.py)."""
    if early.selected(items, __name__, "test_zoo_gpu_runs_the_peers_on_the_cpu"):
        early.submit(*JOB)


@pytest.mark.slow
def test_zoo_gpu_runs_the_peers_on_the_cpu():
    """ViT (tiny, bf16): the synchronous native offload and checkpoint+offload run and give
    torch.compile's loss, with memopt at each; the side-stream path fails on the CPU (it
    needs an accelerator) and its row says why."""
    p = early.result(*JOB)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((p.tmp / "out" / "zoo_gpu_vit.json").read_text())
    rows = {r["variant"]: r for r in doc["rows"]}
    base = rows["torch.compile"]["loss"]
    for label in ("native offload", "checkpoint+offload"):
        r = rows[label]
        assert abs(r["loss"] - base) <= LOSS_RTOL * abs(base), r
        assert r["native"]["tagged"] > 0 and r["native"]["offloaded"] > 0, r["native"]
        assert "ms" in rows[f"memopt budget at {label}"]
        log = rows[f"memopt budget at {label}"]["memopt_log"]  # memopt's INFO lines, kept
        assert any(line.startswith("memopt plan (region 0)") for line in log), log
    stream = rows["native offload, stream"]
    assert "ms" not in stream and stream["error"].startswith("BackendCompilerFailed"), stream
    assert "memopt budget at native offload, stream" not in rows
    assert set(rows) == {"torch.compile", *PEER_LABELS.values()} | {
        f"memopt budget at {label}" for label in ("native offload", "checkpoint+offload")
    }
    assert "| vit | - | peer failed | - |" in markdown([doc])


def test_ab_runs_each_memopt_budget_again_under_its_settings():
    r = _runner(ab="exp:MEMOPT_X=1,MEMOPT_Y=2")
    r.docs["m"]["rows"].append(_row("torch budget=0.5", "torch", 30.0, 3 * GIB, budget=0.5))
    r._queue_budgets("m")
    assert [(s["label"], s["variant"].get("env")) for s in r.todo] == [
        ("memopt budget at torch 0.5", None),
        ("memopt budget at torch 0.5 [exp]", {"MEMOPT_X": "1", "MEMOPT_Y": "2"}),
    ]
    assert r._ab({"label": "torch.compile", "kind": "compile"}) == []  # torch's rows: once


def test_kinds_leave_out_the_budgets():
    r = _runner(kinds=("compile", "torch"))
    r.docs["m"]["rows"].append(_row("torch budget=0.5", "torch", 30.0, 3 * GIB, budget=0.5))
    r._queue_budgets("m")
    assert list(r.todo) == []


def test_a_step_that_went_back_to_a_measured_plan_is_read_as_honored():
    """Mistral at torch's 0.1 (H200, forty-first session): the last planner call was infeasible,
    the step went back to a plan measured inside the budget; the table says so and checks it."""
    doc = json.loads((ROOT / "docs/data/zoo_gpu_mistral_s40.json").read_text())
    points = {p["budget"]: p for p in compare(doc)["points"]}
    low = points[0.1]
    assert low["memopt"]["feasible"] is False and went_back(low["memopt"])
    assert (low["memopt"]["peak"], low["memopt"]["target"]) == (6598638592, 6699150848)
    assert low["honored"] is True and not went_back(points[0.3]["memopt"])
    text = markdown([doc])
    assert text.count("last plan over, went back to one measured inside, honored") == 1
    stale = {**low["memopt"], "memopt_log": []}  # the same row without the step's log
    assert not went_back(stale)
    doc["rows"] = [stale if r is low["memopt"] else r for r in doc["rows"]]
    assert "**infeasible**" in markdown([doc]) and "went back" not in markdown([doc])


def test_regions_compiled_for_a_step_plan_leave_the_verdict_to_the_solved_ones(monkeypatch):
    """Regions compiled for a step plan carry no solver verdict; when the step goes back to the
    first region's own plan (no step plan), the row's verdict is that plan's, not False."""
    from types import SimpleNamespace

    import memopt
    from benchmarks.zoo_gpu import _memopt_facts

    solved = {"feasible": True, "predicted_peak": 6531522788, "text": "fits"}
    step_compiled = {"budget_bytes": 6531522788, "text": ""}  # report.py: no solution
    regions = [SimpleNamespace(extra={"planner": p}) for p in (solved, step_compiled)]
    rep = SimpleNamespace(
        regions=regions,
        offloaded_bytes=lambda: 0,
        config=SimpleNamespace(plan_strings=lambda: []),
        step=SimpleNamespace(
            peak=None, step_plans=4, went_back_from=6698, measured_peak=6500, overhead_floor_s=None
        ),
        frozen_plan=lambda: {"config": ["Div+Tanh+Mul+:1:1"], "sync": {}},
    )
    monkeypatch.setattr(memopt, "report", lambda compiled: rep)
    facts = _memopt_facts(None)
    assert facts["feasible"] is True
    # the plans the step runs (a region compiled for the step plan), not the first region's:
    # Gemma 2's row named its first plan while the step ran the soft-cap flip (H200)
    assert facts["plan_strings"] == ["Div+Tanh+Mul+:1:1"]
    assert (facts["step_plans"], facts["went_back_from"], facts["step_measured_peak"]) == (
        4,
        6698,
        6500,
    )
    assert went_back(facts)  # from memopt's step record, without its log
    solved["feasible"] = False
    assert _memopt_facts(None)["feasible"] is False
    regions.pop(0)
    assert _memopt_facts(None)["feasible"] is None  # no verdict at all: none is made up


def test_a_step_without_one_plan_file_lists_each_running_regions_plans():
    """BART's graph-broken encoder and decoder runs plan one cluster differently, so no one plan
    file holds the step (``frozen_plan`` refuses): the row lists each running region's plan
    strings, prefixed, instead of none (the H200's BART rows had ``plan_strings: []``)."""
    from types import SimpleNamespace

    from benchmarks.common import running_plans

    def refuse():
        raise ValueError("cluster 'Gelu+' is planned 1:-1 in region 0 and none in region 2")

    frozen = [
        {"config": ["Gelu+:1:-1", "Gelu+:1:-1"]},
        {"config": ["Softmax+:1:2"]},
        {"config": ["Gelu+:2:-1"], "step_config": ["Gelu+:1:1"]},  # the step's plan wins
    ]
    regions = [SimpleNamespace(index=i, extra={"frozen": f}) for i, f in enumerate(frozen)]
    rep = SimpleNamespace(regions=regions, frozen_plan=refuse, runs=lambda r: r.index != 1)
    assert running_plans(rep) == ["region 0: Gelu+:1:-1", "region 2: Gelu+:1:1"]
