"""``memopt plan --device-kind cuda`` on a machine without CUDA traces on fake CPU tensors; a
recomputed seeded op (SDPA) then makes torch's partitioner save the CPU generator's state
(5,056 B), where a CUDA graph saves none (Inductor's graph-safe RNG functionalization). The
plan for CUDA sizes that state as on CUDA (``compat.planning_for_cuda``)."""

from __future__ import annotations

import contextlib
import io
import json

import sympy
import torch

from memopt.cli.main import main

TINY = ["hidden_size=64", "intermediate_size=128", "num_hidden_layers=2"]
TINY += ["num_attention_heads=4", "num_key_value_heads=2", "vocab_size=256"]


def _plan(kind: str, monkeypatch) -> dict:
    monkeypatch.setenv("MEMOPT_CONFIG", "Attention+:1:-1")  # recompute both layers' SDPA
    out = io.StringIO()
    argv = ["plan", "hf:llama", "--config", *TINY, "--batch", "4", "--seq", "64"]
    argv += ["--device-kind", kind, "--dtype", "fp32", "--json"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    return json.loads(out.getvalue())["report"]["regions"][0]


def _constant(expr: str) -> int:
    return int(sympy.sympify(expr).as_coeff_Add()[0])


def test_a_cuda_plan_traced_on_cpu_saves_no_cpu_generator_state(monkeypatch):
    import torch._functorch.config as functorch_config

    assert functorch_config.graphsafe_rng_functionalization  # torch's default
    cpu, cuda = _plan("cpu", monkeypatch), _plan("cuda", monkeypatch)
    state = torch.get_rng_state().numel()
    # the saved bytes' constant term: one generator state per recomputed layer on the CPU
    gap = _constant(cpu["final_saved_symbolic"]) - _constant(cuda["final_saved_symbolic"])
    assert gap == 2 * state
    (att,) = [c for c in cuda["clusters"] if c["cluster_id"] == "Attention+"]
    # on CUDA the recompute also drops flash attention's Philox seed and offset (2 x 8 B)
    assert _constant(att["saving_symbolic"]) == 2 * 16
