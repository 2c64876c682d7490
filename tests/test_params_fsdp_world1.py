"""The private FSDP2 state memopt's world-size-1 staging reads and swaps
(memopt.params._fsdp_compat), checked on the CPU at world size 1 with gloo: FSDP2 routes each
unshard through the group's ``wait_for_unshard`` with the pass's training state, and a shard
swapped in for that call is what the unsharded parameter holds, with the host state restored
after it."""

from __future__ import annotations

import torch
from torch import nn

from memopt.params import _fsdp_compat as fc


def test_fsdp_world1_wait_for_unshard_is_routed_and_shards_swap():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    from memopt.params.fsdp import ensure_process_group

    ensure_process_group("cpu")
    mesh = init_device_mesh("cpu", (1,))  # a CPU model, also where CUDA is present
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    policy = CPUOffloadPolicy(pin_memory=False)
    fully_shard(model[0], mesh=mesh, offload_policy=policy)
    fully_shard(model, mesh=mesh, offload_policy=policy)
    layer = model[0]
    assert fc.world_size_one(layer) and fc.group_on_host(layer)
    calls = []

    def wrapper(module, original):
        calls.append((fc.training_phase(module), fc.unshard_pending(module)))
        if fc.training_phase(module) == "forward" and fc.unshard_pending(module):
            host = fc.host_shards(module)
            doubled = [2 * h for h in host]  # a stand-in for the staged device copies
            with fc.staged_shards(module, doubled):
                original()
            assert fc.host_shards(module) == host  # the same tensors are back
            assert fc.group_on_host(module)
            weight = module.weight  # unsharded now: the swapped-in values
            torch.testing.assert_close(weight, 2 * ref_weight)
        else:
            original()

    ref_weight = model[0].weight.full_tensor().detach().clone()
    fc.wrap_wait_for_unshard(layer, wrapper)
    x = torch.randn(4, 8)
    model(x).sum().backward()
    assert ("forward", True) in calls and ("backward", True) in calls, calls
    for fp in fc.param_group(layer).fsdp_params:
        assert fp.offload_to_cpu and fp._sharded_param_data.device.type == "cpu"


def test_fsdp_world1_stage_ahead_off_cuda_warns_and_stages_nothing(caplog):
    from torch.distributed.device_mesh import init_device_mesh

    from memopt.params.fsdp import ensure_process_group, shard_with_offload

    ensure_process_group("cpu")
    mesh = init_device_mesh("cpu", (1,))
    model = nn.Module()
    model.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
    with caplog.at_level("WARNING", logger="memopt"):
        rec = shard_with_offload(model, 0.5, mesh=mesh, stage_ahead=True)
    assert rec.staging is None
    assert "stage_ahead=True applies at world size 1 on CUDA only" in caplog.text
    assert "on cpu" in caplog.text
