"""The FSDP2 path on CUDA at world size 1 (GPU only): memopt's host placement and HostAdamW
against FSDP2's own CPU offload with torch.optim.AdamW(fused=True) stepping the same CPU shards.

Both run the same GPU work and the same CPU kernel, so losses and weights must be bitwise equal;
a host update that read its gradient before FSDP2's non-blocking D2H copy landed (torch 2.11
calls the post-accumulate-grad hook right after queueing that copy) would break the equality.
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.gpu

VOCAB, DIM, LAYERS, STEPS = 512, 512, 4, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return nn.functional.cross_entropy(self.head(x).flatten(0, 1), ids.flatten())


def _model() -> Stack:
    torch.manual_seed(0)
    return Stack()  # on the CPU, as FSDP2's CPU offload wants it


def _train(model, opt) -> list[float]:
    losses = []
    for s in range(STEPS):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, VOCAB, (8, 128), generator=g).cuda()
        loss = model(ids)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.to_local().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def cuda_group():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from memopt.params.fsdp import ensure_process_group

    torch.cuda.set_device(0)
    ensure_process_group("cuda")


def _fsdp2_offload():
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    model = _model()
    for layer in model.layers:
        fully_shard(layer, offload_policy=CPUOffloadPolicy(pin_memory=True))
    fully_shard(model, offload_policy=CPUOffloadPolicy(pin_memory=True))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    return _train(model, opt), _weights(model)


def _memopt(**kw):
    from memopt.params import HostAdamW, shard_with_offload

    model = _model()
    rec = shard_with_offload(model, 1.0)
    opt = HostAdamW(model.parameters(), lr=1e-3, offload=rec, **kw)
    losses = _train(model, opt)
    weights = _weights(model)  # the state dict waits for queued updates
    stats = opt.host_stats()  # counts finished tasks: read after the wait
    opt.close()
    return losses, weights, stats


def test_fsdp_cuda_host_adamw_equals_fsdp2_cpu_offload(cuda_group):
    ref_losses, ref_weights = _fsdp2_offload()
    for kw in (dict(overlap=False), dict(overlap=True), dict(overlap=True, batch="param")):
        losses, weights, stats = _memopt(**kw)
        assert losses == ref_losses, kw
        for name, w in ref_weights.items():
            assert torch.equal(weights[name].cpu(), w.cpu()), (kw, name)
        params_per_step = LAYERS * 6 + 3  # norm, up, down (weight, bias); embed, head w+b
        tasks = (LAYERS + 1) if kw.get("batch", "group") == "group" else params_per_step
        assert stats["tasks"] == STEPS * tasks, kw


def test_fsdp_cuda_threads_setting_is_the_workers_own(cuda_group):
    torch.get_num_threads()
    before = torch.get_num_threads()
    losses, _, _ = _memopt(overlap=True, threads=1)
    assert torch.get_num_threads() == before  # the training thread keeps torch's count
    assert len(losses) == STEPS


def test_fsdp_cuda_auto_placement_moves_groups_mid_training(cuda_group):
    """param_offload="auto" with rates that make every update free when timed alone: a probe
    moves half the bytes to the host after step 5 (pinned shards, moments with them), steps
    6-8 time the host AdamW under training, then what still hides follows; training goes on
    as FSDP2's throughout."""
    from torch.distributed.fsdp import fully_shard

    from memopt.params import HostAdamW, HostRates, shard_with_offload

    steps = 10
    ref = _model()
    for layer in ref.layers:
        fully_shard(layer)
    fully_shard(ref)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, fused=True)
    model = _model()
    rec = shard_with_offload(model, "auto", rates=HostRates(1e15, 1e15, 1e15))
    assert rec.plan.on_host == (False,) * (LAYERS + 1)
    opt = HostAdamW(model.parameters(), lr=1e-3, offload=rec, overlap=True)
    for s in range(steps):
        ids = torch.randint(0, VOCAB, (8, 128), generator=torch.Generator().manual_seed(s)).cuda()
        for m, o in ((ref, ref_opt), (model, opt)):
            loss = m(ids)
            loss.backward()
            o.step()
            o.zero_grad()
            if m is ref:
                want = loss.item()
        torch.testing.assert_close(loss.item(), want, rtol=0, atol=1e-4)
    probe = rec.auto.probe
    assert probe is not None and probe.host_share >= 0.5 and rec.auto.choice is not None
    assert all(h for h, p in zip(rec.plan.on_host, probe.on_host) if p)  # nothing came back
    assert rec.auto.loaded_adam_Bps < 1e15 and len(rec.auto.probe_busy_s) == 3
    for i, host in enumerate(rec.plan.on_host[:-1]):
        want = "cpu" if host else "cuda"
        assert model.layers[i].up.weight.to_local().device.type == want, i
    ref_w, got_w = _weights(ref), _weights(model)
    for name, w in ref_w.items():
        torch.testing.assert_close(got_w[name].cpu(), w.cpu(), rtol=0, atol=1e-5)
    stats = opt.host_stats()
    assert stats["host_pinned_bytes"] == rec.plan.host_bytes  # host shards, pinned by FSDP2
    assert stats["host_pageable_bytes"] == 2 * rec.plan.host_bytes  # exp_avg, exp_avg_sq
    opt.close()


def _staged(fraction, stage: bool, profile: bool = False):
    from memopt.params import HostAdamW, shard_with_offload

    model = _model()
    rec = shard_with_offload(model, fraction, stage_ahead=stage)
    opt = HostAdamW(model.parameters(), lr=1e-3, offload=rec, overlap=True)
    losses = _train(model, opt)
    stats = rec.staging.stats() if rec.staging is not None else None
    events = None
    if profile:  # one more step, traced: which stream ran the host-to-device copies
        import os
        import sys

        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
        import diag_waits

        events = diag_waits.profile(lambda: _train(model, opt))
    weights = _weights(model)
    opt.close()
    return losses, weights, rec, events, stats


def test_fsdp_cuda_world1_staging_moves_copies_off_the_compute_stream(cuda_group):
    """At world size 1 FSDP2 copies host shards on the compute stream when their group runs;
    staged ahead on a side stream, the same bytes arrive earlier and training is bitwise the
    same."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import diag_waits

    for fraction in (1.0, 0.5):
        ref_losses, ref_weights, ref_rec, ref_events, _ = _staged(fraction, False, profile=True)
        assert ref_rec.staging is None
        losses, weights, rec, events, stats = _staged(fraction, True, profile=True)
        assert losses == ref_losses, fraction
        for name, w in ref_weights.items():
            assert torch.equal(weights[name].cpu(), w.cpu()), (fraction, name)
        host_layers = sum(rec.plan.on_host[:-1])
        # the first step learns the order; in each later one every host layer's unshard is
        # served in the forward and in the backward: the root unshards first in both
        # (shard_with_offload reshards it after the forward too, and the head's backward
        # runs first), so each host layer has a group before it; nothing staged in vain
        assert stats["hits"] == (STEPS - 1) * 2 * host_layers, stats
        assert stats["dropped"] == 0, stats

        def h2d(evs):
            top = diag_waits.idle(evs)["top"]
            compute = next(v for k, v in top.items() if "(compute)" in k)
            side = sum(
                ms
                for k, v in top.items()
                if "(compute)" not in k
                for n, ms in v.items()
                if n.startswith("Memcpy HtoD")
            )
            return compute.get("Memcpy HtoD (Pinned -> Device)", 0.0), side

        on_compute, _ = h2d(ref_events)
        assert on_compute > 0, fraction  # FSDP2 alone: the copies stall the compute stream
        staged_compute, staged_side = h2d(events)
        assert staged_side > 0 and staged_compute < on_compute, (fraction, host_layers)


def _device_shards(opt_of):
    """4 steps of the stack sharded on the device; losses, weights and the bytes this run holds
    right after the last backward (before ``step``): counted from what was allocated before it,
    since an earlier run's FSDP2 model (a reference cycle) or weights may still be alive."""
    from torch.distributed.fsdp import fully_shard

    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    model = _model().cuda()
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = opt_of(model)
    losses, after = [], 0
    for s in range(STEPS):
        g = torch.Generator().manual_seed(s)
        ids = torch.randint(0, VOCAB, (8, 128), generator=g).cuda()
        loss = model(ids)
        loss.backward()
        torch.cuda.synchronize()
        after = torch.cuda.memory_allocated() - base
        grads = sum(p.grad.to_local().nbytes for p in model.parameters() if p.grad is not None)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, _weights(model), after, grads


def test_fsdp_cuda_device_overlap_updates_in_backward_to_the_bit_and_frees_the_gradients(
    cuda_group,
):
    """Device shards updated on the side stream as each group's reduce lands: the losses and
    weights of torch's fused AdamW stepping after backward, and no gradient left at its end."""
    from memopt.params import HostAdamW

    ref = _device_shards(lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True))
    got = _device_shards(
        lambda m: HostAdamW(m.parameters(), lr=1e-3, overlap=True, device_overlap=True, model=m)
    )
    assert got[0] == ref[0]
    for name, w in ref[1].items():
        assert torch.equal(got[1][name], w), name
    assert got[3] == 0 and ref[3] > 0  # no gradient left after backward
    assert ref[2] - got[2] >= ref[3]  # and their bytes are back with the allocator
