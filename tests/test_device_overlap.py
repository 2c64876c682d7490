"""``HostAdamW(overlap=True, device_overlap=True)`` (memopt.params.device_overlap): device
shards updated during backward, their gradients freed, with the numbers of the update
``step()`` makes. On the CPU every shard is a host shard, so the tests treat CPU shards as
device shards (``_on_host`` patched); the side stream is CUDA's alone (tests/test_gpu_*)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memopt.errors import ConfigError
from memopt.params import HostAdamW


@pytest.fixture
def cpu_as_device(monkeypatch):
    monkeypatch.setattr(HostAdamW, "_on_host", staticmethod(lambda p: False))


def _model(fsdp: bool) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8), nn.Linear(8, 1))
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from memopt.params.fsdp import ensure_process_group

        ensure_process_group("cpu")
        mesh = init_device_mesh("cpu", (1,))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model


def _train(fsdp: bool, steps: int, accumulate: int = 1, **kw):
    """Weights after ``steps`` optimizer steps of ``accumulate`` micro-batches each, and what
    was left in ``.grad`` after each backward and updated during it."""
    model = _model(fsdp)
    if kw.get("device_overlap"):
        kw["model"] = model  # its FSDP2 groups (an FSDP2 parameter outside them is refused)
    opt = HostAdamW(model.parameters(), lr=1e-2, accumulation_steps=accumulate, **kw)
    g = torch.Generator().manual_seed(1)
    left, during = [], []
    for _ in range(steps):
        for _ in range(accumulate):
            x = torch.randn(4, 8, generator=g)
            model(x).pow(2).mean().backward()
            left.append(sum(p.grad is not None for p in model.parameters()))
            during.append(opt._device.updates)
        opt.step()
        opt.zero_grad()
    weights = [p.detach().full_tensor() if fsdp else p.detach() for p in model.parameters()]
    return [w.clone() for w in weights], left, during


@pytest.mark.parametrize("fsdp", [True, False], ids=["fsdp2_groups", "plain_params"])
def test_device_shards_are_updated_in_backward_to_the_bit_and_their_gradients_freed(
    cpu_as_device, fsdp
):
    n = 6  # parameters: three linears' weights and biases
    ref, left_ref, _ = _train(fsdp, 3, overlap=False)
    got, left, during = _train(fsdp, 3, overlap=True, device_overlap=True)
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b)  # the same fused kernel on the same numbers
    assert left_ref == [n, n, n]  # without it every gradient waits for step()
    assert left == [0, 0, 0]  # with it none is left after backward
    assert during == [n, 2 * n, 3 * n]  # every shard, during each backward


def test_accumulated_micro_batches_update_at_the_last_one(cpu_as_device):
    n = 6
    ref, _, _ = _train(True, 2, accumulate=2, overlap=False)
    got, left, during = _train(True, 2, accumulate=2, overlap=True, device_overlap=True)
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b)
    assert left == [n, 0, n, 0]  # the first micro-batch's gradients stay to be added to
    assert during == [0, n, n, 2 * n]


def test_host_shards_are_left_to_the_host_path():
    """Without the patch the CPU shards are host shards: device_overlap updates none of them,
    HostAdamW's own overlap does (on its worker), and the weights agree with overlap alone."""
    ref, _, _ = _train(True, 2, overlap=True)
    got, _, during = _train(True, 2, overlap=True, device_overlap=True)
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b)
    assert during == [0, 0]


def test_device_overlap_without_overlap_is_refused_by_name():
    model = _model(False)
    with pytest.raises(ConfigError, match=r"device_overlap=True\) needs overlap=True"):
        HostAdamW(model.parameters(), device_overlap=True)


def test_clipping_is_refused_as_with_overlap(cpu_as_device):
    model = _model(False)
    opt = HostAdamW(model.parameters(), overlap=True, device_overlap=True)
    model(torch.randn(2, 8)).sum().backward()
    with pytest.raises(RuntimeError, match="clip_grad_norm_ cannot work with overlap=True"):
        opt.clip_grad_norm_(1.0)
    opt.close()
    model(torch.randn(2, 8)).sum().backward()  # closed: the hooks are gone
    assert all(p.grad is not None for p in model.parameters())


class _Twice(nn.Module):
    """One block used twice per forward (a shared block), optionally checkpointed."""

    def __init__(self, checkpoint: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)
        self.checkpoint = checkpoint

    def forward(self, x):
        for _ in range(2):
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
            else:
                x = self.block(x)
        return self.head(x).pow(2).mean()


def _shared(checkpoint: bool, **kw):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from memopt.params.fsdp import ensure_process_group

    ensure_process_group("cpu")
    mesh = init_device_mesh("cpu", (1,))
    model = _Twice(checkpoint)
    fully_shard(model.block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = HostAdamW(model.parameters(), lr=1e-2, model=model, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        model(torch.randn(4, 8, generator=g)).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().full_tensor().clone() for p in model.parameters()], opt


@pytest.mark.parametrize("checkpoint", [False, True], ids=["shared", "shared_checkpointed"])
def test_a_block_used_twice_is_updated_once_with_its_whole_gradient(cpu_as_device, checkpoint):
    """FSDP2 reduces a block used twice once per use: the update waits for the last landing
    (an update at the first would step on half the gradient, and the second use's backward
    would read shards being updated); a checkpoint's recomputed forward is not a use."""
    ref, _ = _shared(checkpoint, overlap=False)
    got, opt = _shared(checkpoint, overlap=True, device_overlap=True)
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b)
    assert opt._device.updates == 3 * 4  # each of the 4 parameters once per step


def test_an_fsdp2_parameter_outside_every_watched_group_is_refused(cpu_as_device):
    model = _model(True)
    with pytest.raises(ConfigError, match=r"FSDP2 parameter of shape \(16, 8\) is in no watched"):
        HostAdamW(model.parameters(), overlap=True, device_overlap=True)
    HostAdamW(model.parameters(), overlap=True, device_overlap=True, model=model).close()
