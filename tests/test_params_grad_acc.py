"""bf16 host shards (``host_dtype="auto"`` at world size 1) train with the numbers of fp32 host shards,
bit for bit, under gradient accumulation and clipping (memopt.params.grad_acc), on FSDP2 at world
size 1 on the CPU; gradients changed outside HostAdamW or cleared mid-step are noticed."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import memopt
from memopt.params import _fsdp_compat as fc
from memopt.params import shard_with_offload
from memopt.params.grad_acc import Fp32Grads
from tests.helpers import tiny_llama


@pytest.fixture
def no_process_group():
    """memopt creates a world-size-1 group when none exists; the test removes what it made."""
    created = not dist.is_initialized()
    yield
    if created and dist.is_initialized():
        dist.destroy_process_group()


def _mp():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def _ids(step: int, micro: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * step + micro)
    return torch.randint(1, 128, (2, 12), generator=g)


def _train(host_dtype, *, overlap, clip, ckpt=False, kernel="auto", steps=3, micro=3):
    """``steps`` steps of ``micro`` micro-batches, every group on the host; returns the losses,
    all fp32 weights (the masters for bf16 shards) and ``exp_avg_sq`` (flat), and the record."""
    torch.manual_seed(0)
    model = tiny_llama(num_hidden_layers=2)
    if ckpt:
        model.gradient_checkpointing_enable()
    rec = shard_with_offload(model, 1.0, mp_policy=_mp(), host_dtype=host_dtype)  # root too
    acc = micro if overlap else 1
    opt = memopt.HostAdamW(
        model.parameters(),
        lr=1e-2,
        offload=rec,
        overlap=overlap,
        accumulation_steps=acc,
        kernel=kernel,
    )
    landed = []

    def no_param_hooks(params):  # torch >= 2.13 copies synchronously for a param with one
        landed.append(len(params))
        assert not any(getattr(p, "_post_accumulate_grad_hooks", None) for p in params)

    notices = [fc.on_reduced(m, no_param_hooks) for _, m in rec.groups]
    losses = []
    for s in range(steps):
        for m in range(micro):
            ids = _ids(s, m)
            loss = model(input_ids=ids, labels=ids).loss / micro
            loss.backward()
            losses.append(loss.item())
        if clip is not None:
            opt.clip_grad_norm_(clip)
        opt.step()
        opt.zero_grad()
    opt.wait()
    params = list(model.parameters())
    ws = [opt.state[p].get("master_param", p).to_local().float().clone() for p in params]
    vs = [opt.state[p]["exp_avg_sq"].to_local().clone() for p in params]
    opt.close()
    for n in notices:
        n.remove()
    assert sum(landed) == len(params) * steps * micro  # every gradient, every micro-batch
    assert not any("post_backward" in vars(fc.param_group(m)) for _, m in rec.groups)
    return losses, torch.cat([w.flatten() for w in ws]), torch.cat([v.flatten() for v in vs]), rec


@pytest.mark.parametrize(
    "overlap,clip,ckpt,kernel",
    [(False, 0.05, False, "auto"), (True, None, True, "auto"), (False, 0.05, False, "torch")],
    ids=["clip", "overlap-ckpt", "clip-torch-ops"],
)
def test_bf16_host_shards_accumulate_and_clip_like_fp32_shards(
    no_process_group, overlap, clip, ckpt, kernel
):
    """Three micro-batches per step, clipped (overlap=False) or updated during the backward of
    the last one with HF gradient checkpointing (overlap=True): bf16 host shards (host_dtype
    "auto") give fp32 host shards' losses, weights and moments bit for bit. The
    control: with FSDP2's own bf16 accumulation (the fp32 buffers turned off) they differ.
    ``kernel="torch"``: the buffers' passes by torch's ops instead of the C loop."""
    kw = dict(overlap=overlap, clip=clip, ckpt=ckpt, kernel=kernel)
    la, wa, va, ra = _train(None, **kw)
    lb, wb, vb, rb = _train("auto", **kw)
    assert ra.host_dtype is None and rb.host_dtype == torch.bfloat16 and rb.plan.on_host[0]
    assert la == lb
    assert torch.equal(wa, wb) and torch.equal(va, vb)
    arm = Fp32Grads._arm
    try:
        Fp32Grads._arm = lambda self, params, module, args: None  # FSDP2 adds in bf16
        lc, wc, vc, _ = _train("auto", **kw)
    finally:
        Fp32Grads._arm = arm
    assert not torch.equal(wa, wc)


def test_host_dtype_auto_is_bf16_at_world_size_1_and_opt_in(no_process_group):
    rec = shard_with_offload(tiny_llama(num_hidden_layers=2), 0.5, mp_policy=_mp())
    assert rec.host_dtype is None and not rec.masters  # the default: the model's dtype
    dist.destroy_process_group()
    rec = shard_with_offload(
        tiny_llama(num_hidden_layers=2), 0.5, mp_policy=_mp(), host_dtype="auto"
    )
    assert rec.host_dtype == torch.bfloat16 and rec.host_reduce_dtype == torch.bfloat16
    assert rec.masters  # until a HostAdamW takes them


def test_another_optimizer_on_bf16_host_shards_raises(no_process_group):
    """torch's AdamW would update the bf16 shard itself (the fp32 masters unused): its step
    raises a memopt error that says what to do; HostAdamW takes the masters and steps."""
    model = tiny_llama(num_hidden_layers=2)
    rec = shard_with_offload(model, 0.5, mp_policy=_mp(), host_dtype="auto")
    n = len(rec.masters)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = _ids(0, 0)
    model(input_ids=ids, labels=ids).loss.backward()
    with pytest.raises(memopt.ConfigError, match=rf"AdamW steps {n} bf16 host shard\(s\)"):
        opt.step()
    with pytest.raises(memopt.ConfigError, match="pass it as HostAdamW"):
        memopt.HostAdamW(model.parameters(), lr=1e-2)  # the record not given
    host = memopt.HostAdamW(model.parameters(), lr=1e-2, offload=rec)
    host.step()  # its own step passes the guard
    assert not rec.masters
    host.close()


def test_gradients_changed_outside_or_cleared_mid_step(no_process_group):
    """model.zero_grad() between a forward and its backward voids the earlier micro-batch: the
    step equals fp32 shards' (whose gradient holds that backward's only). After three backwards
    ``.grad`` shows the fp32 sum rounded to bf16. torch's clip_grad_norm_ on it: a warning."""
    runs, seen = [], []
    for host_dtype in (None, "auto"):
        torch.manual_seed(0)
        model = tiny_llama(num_hidden_layers=2)
        rec = shard_with_offload(model, 0.5, mp_policy=_mp(), host_dtype=host_dtype)
        opt = memopt.HostAdamW(model.parameters(), lr=1e-2, offload=rec)
        for m in range(2):
            ids = _ids(0, m)
            loss = model(input_ids=ids, labels=ids).loss
            if m == 1:
                model.zero_grad()
            loss.backward()
        opt.step()
        opt.zero_grad()
        w = model.model.layers[0].mlp.up_proj.weight
        runs.append(opt.state[w].get("master_param", w).to_local().float().clone())
        for m in range(3):  # what readers see after backward: bf16(fp32 shards' gradient)
            ids = _ids(1, m)
            model(input_ids=ids, labels=ids).loss.backward()
        seen.append(w.grad.to_local().bfloat16().clone())
        if host_dtype == "auto":
            assert opt.host_stats()["host_fp32_grad_bytes"] > 0
            with pytest.warns(UserWarning, match="changed outside HostAdamW"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
                opt.step()
        opt.close()
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(seen[0], seen[1])
