"""The one door to FSDP2's private state (``torch.distributed.fsdp._fully_shard``).

Checked against torch 2.11 and 2.13: ``FSDPModule._get_fsdp_state()._fsdp_param_group`` holds
``fsdp_params``; each ``FSDPParam`` keeps the padded local shard in ``_sharded_param_data`` (1-D),
the parameter (a DTensor over a narrowed view of it) in ``sharded_param``, and the flags
``offload_to_cpu`` / ``pin_memory`` that the all-gather copy-in and the reduce-scatter copy-out
read. FSDP2 takes an offload policy only at ``fully_shard`` time; :func:`move_group_to_host`
gives an already sharded group the state ``CPUOffloadPolicy`` would have produced.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_common import _from_local_no_grad
from torch.distributed.tensor import DTensor


def is_fsdp(module: nn.Module) -> bool:
    return isinstance(module, FSDPModule)


def param_group(module: nn.Module):
    """The ``FSDPParamGroup`` of a ``fully_shard``-ed module (None when it manages no params)."""
    return module._get_fsdp_state()._fsdp_param_group


def group_params(module: nn.Module) -> list[nn.Parameter]:
    """The sharded parameters (DTensors) this ``fully_shard`` call manages."""
    group = param_group(module)
    return [] if group is None else [fp.sharded_param for fp in group.fsdp_params]


def keyed_group_params(module: nn.Module) -> list[tuple[tuple[int, str], nn.Parameter]]:
    """``((id(owner module), attribute name), sharded param)`` for each managed parameter: the
    key names the parameter before and after ``fully_shard`` (which replaces the object)."""
    group = param_group(module)
    if group is None:
        return []
    return [
        ((id(fp._module_info.module), fp._module_info.param_name), fp.sharded_param)
        for fp in group.fsdp_params
    ]


def fsdp_params_by_id(modules) -> dict[int, object]:
    """``id(sharded param) -> FSDPParam`` over the ``fully_shard``-ed ``modules``."""
    out = {}
    for mod in modules:
        group = param_group(mod) if is_fsdp(mod) else None
        for fp in group.fsdp_params if group is not None else ():
            out[id(fp.sharded_param)] = fp
    return out


def grad_copy_event(fsdp_param) -> torch.cuda.Event | None:
    """The event after the D2H copy of this parameter's reduced gradient, while in flight.

    torch 2.11 copies a host group's gradient with ``non_blocking=True`` and calls the
    post-accumulate-grad hooks right after recording this event, so a hook that reads the
    gradient on the CPU must wait for it; torch 2.13 copies synchronously when a hook exists
    (the event is then None).
    """
    return getattr(fsdp_param, "grad_offload_event", None)


def group_on_host(module: nn.Module) -> bool:
    group = param_group(module)
    return group is not None and isinstance(group.offload_policy, CPUOffloadPolicy)


def move_group_to_host(module: nn.Module, pin_memory: bool) -> None:
    """Put a sharded group's local shards on the host, as ``CPUOffloadPolicy`` would have.

    The parameter objects stay the same (optimizers built before still hold them): the local
    tensors are replaced, and a parameter whose DTensor lived on the device is given a host one
    in place (:func:`rehome`), so FSDP2 can assign it host gradients. Move optimizer state
    with it (``HostAdamW.adopt_host``) or build the optimizer after this call.
    """
    group = param_group(module)
    if group is None or isinstance(group.offload_policy, CPUOffloadPolicy):
        return
    group.offload_policy = CPUOffloadPolicy(pin_memory=pin_memory)
    for fp in group.fsdp_params:
        data = fp._sharded_param_data.detach().cpu()
        if pin_memory:
            data = data.pin_memory()
        p = fp.sharded_param
        fp._sharded_param_data = data.view(-1)
        rehome(p, data.view(fp.padded_sharded_param_size).narrow(0, 0, p._local_tensor.size(0)))
        fp.offload_to_cpu, fp.pin_memory = True, pin_memory


def rehome(p: nn.Parameter, local: torch.Tensor) -> None:
    """Make ``local`` the local shard of the DTensor parameter ``p``, keeping the object.

    A DTensor's own device is fixed when it is made, and autograd refuses a gradient on another
    device, so across devices a new parameter with the same spec is swapped into ``p``
    (``torch.utils.swap_tensors``); the attributes ``p`` carried (hooks) are kept. The new
    DTensor is made as FSDP2 makes its host shards (``_from_local_no_grad``): the public
    ``DTensor.from_local`` would copy a host shard back to the mesh's device.
    """
    if p._local_tensor.device == local.device:
        p._local_tensor = local
        return
    new = nn.Parameter(_from_local_no_grad(local, p._spec), requires_grad=p.requires_grad)
    if new._local_tensor.device != local.device:
        raise RuntimeError(f"memopt: a host shard landed on {new._local_tensor.device}")
    kept = {k: v for k, v in p.__dict__.items() if k not in ("_local_tensor", "_spec")}
    torch.utils.swap_tensors(p, new)
    p.__dict__.update(kept)


def is_dtensor(t: torch.Tensor) -> bool:
    return isinstance(t, DTensor)


def local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (the tensor itself otherwise)."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t
