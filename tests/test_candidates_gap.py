"""The vocabulary projection is a recompute candidate of its own (issue 16, Qwen2's 151,936-entry
vocabulary): torch's min-cut with ``activation_memory_budget=0.1`` recomputes the logits and
keeps the layers' matmuls, a choice memopt's plans could not express while the logits were the
last occurrence of the layers' ``MatMul+`` cluster (a plan recomputes a cluster's first k
occurrences). Units: the logits are 512x512 fp32 = 1 MiB.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn

import memopt
from memopt import api, facts
from memopt.plan import Strategy
from tests.helpers import compare, run_step

MiB = 2**20


class Net(nn.Module):
    """Two residual SiLU layers and a vocabulary projection with a cross-entropy loss."""

    def __init__(self, d: int = 64, vocab: int = 512, n: int = 2):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(n))
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, x, labels):
        for lay in self.layers:
            x = x + F.silu(lay(x))
        return F.cross_entropy(self.lm_head(x), labels)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(512, 64, generator=g),
        "labels": torch.randint(0, 512, (512,), generator=g),
    }


def _clusters(rep) -> dict[str, tuple[int, int]]:
    return {
        c["cluster_id"]: (c["freq"], c["saving_bytes"])
        for c in rep.to_dict()["regions"][0]["clusters"]
    }


def test_logits_are_their_own_cluster_and_recompute_alone():
    torch.manual_seed(0)
    model, inputs = Net(), _inputs()
    # tests/helpers.py:compare twice on one model and inputs: torch.compile's step once
    torch._dynamo.reset()
    reference = run_step(model, torch.compile(model), inputs, lambda out: out)

    def compare_once(**optimize_kwargs):
        l0, g0, b0 = reference
        torch._dynamo.reset()
        opt = memopt.optimize(model, **optimize_kwargs)
        l1, g1, b1 = run_step(model, opt, inputs, lambda out: out)
        torch.testing.assert_close(l1, l0)
        assert g0.keys() == g1.keys()
        for k in g0:
            torch.testing.assert_close(g1[k], g0[k], msg=lambda m, k=k: f"grad {k}: {m}")
        return memopt.report(opt), b0, b1

    rep, before, _ = compare_once(level=0)
    # the layers' matmul outputs (512x64 fp32, saved for SiLU's backward) stay one cluster
    assert _clusters(rep)["MatMul+"] == (2, 262_144)
    assert _clusters(rep)["MatMul+In_lm_head+"] == (1, MiB)
    # the plan torch's min-cut makes at budget 0.1: the logits recomputed, the layers kept
    rep, _, after = compare_once(config="MatMul+In_lm_head+:1:-1")
    assert before - after == MiB
    assert rep.saved_bytes() == (before, after)


def test_planner_sees_the_logits_alone_with_one_matmul_to_recompute():
    torch.manual_seed(0)
    model, inputs = Net(), _inputs()
    torch._dynamo.reset()
    opt = memopt.optimize(model, budget=0.5, fuse_loss=False)  # the unfused head's logits
    opt(**inputs).backward()
    (region,) = api._STATES[model].problems.values()
    (logits,) = [c for c in region.problem.candidates if c.cluster_id == "MatMul+In_lm_head+"]
    assert (logits.occurrence, logits.nbytes, logits.recomputable) == (0, MiB, True)
    # one 512x64 @ 64x512 matmul: 2*512*64*512 FLOPs
    assert sum(op.flops for op in logits.recompute_ops) == 2 * 512 * 64 * 512
    layers = [c for c in region.problem.candidates if c.cluster_id == "MatMul+"]
    assert [c.nbytes for c in layers] == [131_072, 131_072]


class _Partitioned(Exception):
    """Raised by the recorder once it has torch's partition: nothing after it is checked, so
    Inductor need not lower and build the two graphs' kernels."""


class _Recorder(CustomPartitionerFn):
    """torch's own partition (with the active activation_memory_budget); records the storages
    the forward saves, then stops the compile (:class:`_Partitioned`)."""

    def __init__(self):
        self.saved: dict[str, tuple[tuple[int, ...], int]] = {}

    def __call__(self, gm, joint_inputs, **kw):
        fw, _ = min_cut_rematerialization_partition(gm, joint_inputs, **kw)
        for n in facts.saved_outputs(fw, kw["num_fwd_outputs"]):
            r = facts.storage_root(n)
            if r.op != "placeholder":
                val = facts.tensor_val(r)
                self.saved[r.name] = (tuple(val.shape), int(facts.nbytes_expr(val)))
        raise _Partitioned

    def uuid(self):
        return None


def test_qwen2_logits_dropped_by_torch_at_budget_0_1_are_a_plan_of_their_own():
    import transformers

    # one layer: the logits' own cluster is the point, not the depth
    vocab, batch, seq, layers = 4096, 2, 32, 1
    cfg = transformers.Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).train()
    ids = torch.randint(1, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "labels": ids}
    logits_bytes = batch * seq * vocab * 4  # 1 MiB
    torch._dynamo.reset()
    rec = _Recorder()
    with torch._functorch.config.patch(activation_memory_budget=0.1):
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as stopped:
            torch.compile(model, options={"custom_partitioner_fn": rec})(**inputs)
    assert isinstance(stopped.value.inner_exception, _Partitioned)  # torch's partition, made
    assert rec.saved
    assert (batch, seq, vocab) not in {shape for shape, _ in rec.saved.values()}
    # and keeps layer matmul outputs (o_proj's, 64x64 fp32, one per layer): MatMul+ occurrences
    # that come before the logits, so a count of MatMul+ could not recompute the logits without
    # them
    kept = [n for n, (shape, _) in rec.saved.items() if shape == (batch * seq, 64)]
    assert len(kept) == layers

    rep, before, after, _ = compare(model, inputs, config="MatMul+In_lm_head+:1:-1")
    assert before - after == logits_bytes == MiB
    (row,) = [
        c for c in rep.to_dict()["regions"][0]["clusters"] if c["cluster_id"].endswith("lm_head+")
    ]
    assert (row["cluster_id"], row["freq"], row["strategy"]) == (
        "MatMul+In_lm_head+",
        1,
        int(Strategy.RECOMPUTE),
    )
