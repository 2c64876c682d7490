"""benchmarks/largest_batch.py: the batch search and its bookkeeping, with fake trials (CPU, no
compile; the script's --smoke run compiles and takes about a minute, so it is not run here)."""

from __future__ import annotations

import importlib.util
import json
import os
import random

import pytest
import torch

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "largest_batch.py")
_spec = importlib.util.spec_from_file_location("largest_batch_script", _PATH)
lb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lb)


def fits_up_to(limit: int):
    return lambda batch: batch <= limit


def batches(trials):
    return [b for b, _ in trials]


def test_doubling_then_bisection_exact_trials():
    best, trials = lb.largest_batch(fits_up_to(13), 64)
    assert best == 13
    assert trials == [
        (1, True),
        (2, True),
        (4, True),
        (8, True),
        (16, False),
        (12, True),
        (14, False),
        (13, True),
    ]


@pytest.mark.parametrize(
    "limit, expected",
    [
        (0, [1]),
        (1, [1, 2]),
        (64, [1, 2, 4, 8, 16, 32, 64]),
        (63, [1, 2, 4, 8, 16, 32, 64, 48, 56, 60, 62, 63]),
    ],
)
def test_doubling_edges(limit, expected):
    best, trials = lb.largest_batch(fits_up_to(limit), 64)
    assert best == limit
    assert batches(trials) == expected


@pytest.mark.parametrize(
    "start, expected",
    [
        (13, [13, 14]),
        (10, [10, 11, 12, 14, 13]),
        (20, [20, 19, 18, 16, 12, 14, 13]),
        (100, [64, 63, 62, 60, 56, 48, 32, 16, 8, 12, 14, 13]),  # clamped to max_batch
    ],
)
def test_start_hint_gallops_then_bisects(start, expected):
    best, trials = lb.largest_batch(fits_up_to(13), 64, start=start)
    assert best == 13
    assert batches(trials) == expected


def test_guess_after_first_fit():
    seen = []

    def guess(batch, result):
        seen.append((batch, result))
        return 13

    best, trials = lb.largest_batch(lambda b: {"ok": b <= 13, "peak": b}, 64, guess=guess)
    assert (best, batches(trials)) == (13, [1, 13, 14])
    assert seen == [(1, {"ok": True, "peak": 1})]  # called once, with the trial's result
    best, trials = lb.largest_batch(fits_up_to(13), 64, guess=lambda b, r: 15)
    assert (best, batches(trials)) == (13, [1, 15, 14, 13])
    best, trials = lb.largest_batch(fits_up_to(13), 64, guess=lambda b, r: None)
    assert batches(trials) == [1, 2, 4, 8, 16, 12, 14, 13]


def test_search_is_exact_and_never_repeats_a_trial():
    rng = random.Random(0)
    for _ in range(3000):
        max_batch = rng.randint(1, 70)
        limit = rng.randint(0, max_batch)
        start = rng.choice([None, rng.randint(-2, max_batch + 5)])
        g = rng.choice([None, rng.randint(-3, max_batch + 9)])
        calls = []

        def trial(b, limit=limit, max_batch=max_batch, calls=calls):
            assert 1 <= b <= max_batch and b not in calls
            calls.append(b)
            return b <= limit

        guess = None if g is None else (lambda b, r, g=g: g)
        best, trials = lb.largest_batch(trial, max_batch, start=start, guess=guess)
        assert best == limit, (max_batch, limit, start, g, trials)
        assert batches(trials) == calls


def test_is_oom_follows_the_exception_chain():
    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        except Exception as inner:
            raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as outer:
        assert lb.is_oom(outer)
    assert not lb.is_oom(ValueError("shape mismatch"))


def test_run_all_saves_each_trial_and_resumes(tmp_path):
    out = str(tmp_path / "lb.json")
    limits = {"compile": 5, "memopt-level1": 13, "memopt-budget": 11, "torch-budget-0.1": 7}
    ran = []

    def trial(variant, batch):
        ran.append((variant, batch))
        if os.path.exists(out):  # saved after every trial, so readable while running
            json.load(open(out))
        if batch > limits[variant]:
            return {"batch": batch, "ok": False, "error": "OutOfMemoryError: simulated"}
        tps = 1000.0 * batch / (1 + 0.01 * batch)
        return {"batch": batch, "ok": True, "tokens_per_s": tps, "ms": 1.0, "peak": batch << 30}

    args = lb.parse_args(["--smoke", "--max-batch", "64", "--out", out, "--start", "compile=4"])
    assert args.max_batch == 8  # --smoke caps it
    args.max_batch = 64
    data = lb.run_all(args, trial, {"device": "fake", "max_batch": 64})
    saved = json.load(open(out))
    assert saved == json.loads(json.dumps(data))
    v = saved["variants"]
    assert {k: v[k]["largest"] for k in v} == limits
    assert [t["batch"] for t in v["compile"]["trials"]] == [4, 5, 6]
    assert [t["batch"] for t in v["memopt-level1"]["trials"]] == [1, 2, 4, 8, 16, 12, 14, 13]
    assert v["memopt-level1"]["at_largest"]["batch"] == 13
    assert all(x["status"] == "done" for x in v.values())
    text = lb.table(saved)
    assert "| compile | 5 |" in text and "| memopt-level1 | 13 |" in text
    assert "memopt-level1: batch 13 = 2.60x compile's 5 (met)" in text
    assert "memopt-budget: batch 11 = 2.20x compile's 5 (met)" in text

    # --resume: the same searches replay from the saved trials without running any
    n = len(ran)
    args.resume = True
    again = lb.run_all(args, trial, {"device": "fake", "max_batch": 64}, previous=saved)
    assert len(ran) == n
    assert {k: again["variants"][k]["largest"] for k in limits} == limits


def test_run_all_stops_a_variant_on_a_non_oom_error(tmp_path):
    out = str(tmp_path / "lb.json")

    def trial(variant, batch):
        if variant == "memopt-budget" and batch == 2:
            raise lb.VariantError("PlanError: boom", {"batch": 2, "ok": False, "fatal": True})
        return {"batch": batch, "ok": batch <= 3, "tokens_per_s": 1.0}

    args = lb.parse_args(["--smoke", "--out", out])
    data = lb.run_all(args, trial, {"device": "fake", "max_batch": 8})
    v = data["variants"]
    assert v["memopt-budget"]["status"] == "error: PlanError: boom"
    assert "largest" not in v["memopt-budget"]
    assert v["torch-budget-0.1"]["largest"] == 3  # the other variants still ran
    assert "PlanError: boom" in lb.table(json.load(open(out)))
