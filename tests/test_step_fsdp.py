"""Step plans under FSDP2 (``fully_shard`` per layer + root, the split of real training): gloo,
world size 2, one spawn for every check (started when collection ends: tests/early.py). Losses equal FSDP2 + torch.compile; a budget is a
budget for the step; ``offload_layers`` offloads whole layers compiled as their own regions.

A transformers Llama (3 layers) compiles to one region per layer here (FSDP2's hooks break the
graph around every block) plus the embedding and the head.
"""

from __future__ import annotations

import torch

import memopt
from tests import early
from tests.helpers import spawn_gloo_job

LAYERS = 3


def _model():
    from torch.distributed.fsdp import fully_shard

    from tests.helpers import tiny_llama

    torch.manual_seed(0)
    model = tiny_llama(num_hidden_layers=LAYERS, hidden_size=64, intermediate_size=256)
    for layer in model.model.layers:
        fully_shard(layer)
    return fully_shard(model)


def _train(compiled, model, rank, steps=3):
    torch._dynamo.reset()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for s in range(steps):
        ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(s + rank))
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _run(rank, **settings):
    model = _model()
    compiled = memopt.optimize(model, **settings)
    losses = _train(compiled, model, rank)
    return losses, memopt.report(compiled)


def check_step_plans(rank):
    model = _model()
    ref = _train(torch.compile(model), model, rank)

    losses, rep = _run(rank, level=1)
    torch.testing.assert_close(losses, ref, rtol=1e-5, atol=1e-5)
    before, after = rep.saved_bytes()
    # one region per layer: every layer's run is in the step
    assert rep.step.complete and len(rep.step.sequence) >= LAYERS + 1
    assert after < before

    losses, rep = _run(rank, budget=0.5)
    torch.testing.assert_close(losses, ref, rtol=1e-5, atol=1e-5)
    b_before, b_after = rep.saved_bytes()
    assert rep.step.peak is not None and rep.step.target is not None  # one plan for the step
    assert b_after < b_before
    assert "Step plan: predicted step peak" in rep.table()
    # FSDP2's per-layer regions: no plan that fits costs less than the proven floor
    assert 0 < rep.step.overhead_floor_s <= rep.step.overhead_s

    # the head's linear layer and loss fused, under FSDP2's per-layer regions and a budget
    losses, rep = _run(rank, budget=0.5, fuse_loss=True)
    torch.testing.assert_close(losses, ref, rtol=1e-5, atol=1e-5)
    fused = [r.extra["fused_loss"]["losses"] for r in rep.regions if "fused_loss" in r.extra]
    assert fused and fused[0][0]["module"] == "lm_head" and fused[0][0]["logits_reused"]

    losses, rep = _run(rank, offload_layers=2, offload_min_bytes=0)
    torch.testing.assert_close(losses, ref, rtol=1e-5, atol=1e-5)
    assert len(rep.step.offload_runs) >= 2 and rep.step.offloaded_bytes > 0
    assert rep.step.prefetched > 0


def _checks(rank: int, tmp: str) -> None:
    check_step_plans(rank)


JOB = ("step_fsdp", spawn_gloo_job("tests.test_step_fsdp"), 1800)


def start_early(items) -> None:
    """The spawn starts when collection ends and overlaps the suite (tests/early.py)."""
    if early.selected(items, __name__, "test_step_plans_fsdp_gloo_world_size_2"):
        early.submit(*JOB)


def test_step_plans_fsdp_gloo_world_size_2():
    done = early.result(*JOB)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
