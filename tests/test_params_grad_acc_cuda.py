"""bf16 host shards on CUDA at world size 1 (GPU only): with gradient accumulation and clipping
they train with fp32 host shards' numbers bit for bit (memopt.params.grad_acc), through FSDP2's
pinned D2H gradient copies (non-blocking on torch 2.11)."""

from __future__ import annotations

import pytest
import torch

from tests.test_params_fsdp_cuda import VOCAB, _model, cuda_group  # noqa: F401 -- a fixture

pytestmark = pytest.mark.gpu


def _run(host_dtype, *, overlap: bool, clip: float | None, micro: int = 3, steps: int = 3):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from memopt.params import HostAdamW, shard_with_offload

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = _model()
    rec = shard_with_offload(model, 1.0, mp_policy=mp, host_dtype=host_dtype)
    acc = micro if overlap else 1
    opt = HostAdamW(
        model.parameters(), lr=1e-3, offload=rec, overlap=overlap, accumulation_steps=acc
    )
    losses = []
    for s in range(steps):
        for m in range(micro):
            g = torch.Generator().manual_seed(10 * s + m)
            ids = torch.randint(0, VOCAB, (8, 128), generator=g).cuda()
            loss = model(ids) / micro
            loss.backward()
            losses.append(loss.item())
        if clip is not None:
            opt.clip_grad_norm_(clip)
        opt.step()
        opt.zero_grad()
    opt.wait()
    w = model.layers[1].up.weight
    master = opt.state[w].get("master_param", w).to_local().float().cpu()
    v = opt.state[w]["exp_avg_sq"].to_local().cpu()
    opt.close()
    return rec, losses, master, v


@pytest.mark.parametrize("overlap,clip", [(False, 0.1), (True, None)], ids=["clip", "overlap"])
def test_fsdp_cuda_bf16_host_shards_accumulate_like_fp32(cuda_group, overlap, clip):  # noqa: F811
    ra, la, wa, va = _run(None, overlap=overlap, clip=clip)
    rb, lb, wb, vb = _run("auto", overlap=overlap, clip=clip)
    assert ra.host_dtype is None and rb.host_dtype == torch.bfloat16
    assert la == lb and torch.equal(wa, wb) and torch.equal(va, vb)
