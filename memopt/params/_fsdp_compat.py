"""The one door to FSDP2's private state (``torch.distributed.fsdp._fully_shard``).

Checked against torch 2.11 and 2.13: ``FSDPModule._get_fsdp_state()._fsdp_param_group`` holds
``fsdp_params``; each ``FSDPParam`` keeps the padded local shard in ``_sharded_param_data`` (1-D),
the parameter (a DTensor over a narrowed view of it) in ``sharded_param``, and the flags
``offload_to_cpu`` / ``pin_memory`` that the all-gather copy-in and the reduce-scatter copy-out
read. FSDP2 takes an offload policy only at ``fully_shard`` time; :func:`move_group_to_host`
gives an already sharded group the state ``CPUOffloadPolicy`` would have produced.
"""

from __future__ import annotations

from contextlib import contextmanager

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

    FSDP2 copies a host group's gradient with ``non_blocking=True`` into pinned memory (when it
    assigns a fresh gradient and, from torch 2.13, when the parameter has no post-accumulate-
    grad hook) and records this event, so a reader on the CPU must wait for it (None after a
    synchronous copy, and once ``finalize_backward`` waited for it).
    """
    return getattr(fsdp_param, "grad_offload_event", None)


def post_backward_calls(module: nn.Module) -> int:
    """How many times the group of ``module`` ran ``post_backward`` since a notice was first
    registered on it (:func:`on_reduced`): once per use of the module in the forward (torch
    2.13 reduces at the last of them)."""
    return getattr(param_group(module), "_memopt_calls", 0)


def wait_for_reduced(module: nn.Module, stream) -> None:
    """Make CUDA ``stream`` wait (no host synchronization) until the gradients the group of
    ``module`` just reduced are written: the group's post-reduce event, or where it has none
    the streams FSDP2 reduces on."""
    group = param_group(module)
    event = getattr(group, "_post_reduce_event", None)
    if event is not None:
        stream.wait_event(event)
        return
    ctx = getattr(group, "comm_ctx", None)
    for name in ("reduce_scatter_stream", "all_reduce_stream"):
        other = getattr(ctx, name, None)
        if isinstance(other, torch.cuda.Stream):
            stream.wait_stream(other)


class _Notice:
    def __init__(self, group, fns: list, fn) -> None:
        self._group, self._fns, self._fn = group, fns, fn

    def remove(self) -> None:
        if self._fn in self._fns:
            self._fns.remove(self._fn)
        if not self._fns and "post_backward" in vars(self._group):
            del self._group.post_backward  # the class's method again
            del self._group._memopt_reduced


def _version(g) -> int:
    return -1 if g is None else local(g)._version


def on_reduced(module: nn.Module, fn) -> _Notice:
    """Call ``fn(params)`` after the FSDP2 group of ``module`` has reduced its gradients into its
    sharded parameters (the end of its ``post_backward``, which autograd runs once the group's
    backward is done and the root's final callback runs for groups autograd skipped), with the
    parameters whose ``.grad`` that call assigned or accumulated into (object or version
    changed). Callbacks run in registration order; the returned handle's ``remove()`` drops one.

    One notice per group, not a post-accumulate-grad hook per parameter: from torch 2.13 such a
    hook on an offloaded parameter makes FSDP2 copy its gradient to the host synchronously, into
    fresh pageable memory (FSDP2 cannot tell when a hook reads it). ``post_backward`` is looked
    up on the instance by both callers, so an instance attribute routes them here."""
    group = param_group(module)
    fns = vars(group).get("_memopt_reduced")
    if fns is None:
        fns = group._memopt_reduced = []
        original = group.post_backward

        def post_backward(*args, **kwargs):
            group._memopt_calls = getattr(group, "_memopt_calls", 0) + 1
            before = [(fp, fp.sharded_param.grad) for fp in group.fsdp_params]
            versions = [_version(g) for _, g in before]
            out = original(*args, **kwargs)
            landed = [
                fp.sharded_param
                for (fp, g), v in zip(before, versions)
                if (now := fp.sharded_param.grad) is not None
                and (now is not g or _version(now) != v)
            ]
            if landed:
                for f in list(fns):
                    f(landed)
            return out

        group.post_backward = post_backward
    fns.append(fn)
    return _Notice(group, fns, fn)


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


# ---- world size 1: FSDP2's unshard copies host shards itself (memopt.params.prefetch) ----------


def wrap_wait_for_unshard(module: nn.Module, wrapper) -> None:
    """Route the group's ``wait_for_unshard`` (where, at world size 1, FSDP2 copies each host
    shard to the device: ``all_gather_inputs`` reads ``_sharded_param_data`` and moves it when
    ``offload_to_cpu``) through ``wrapper(module, original)``; an instance attribute, so FSDP2's
    own ``self.wait_for_unshard()`` calls find it."""
    group = param_group(module)
    original = group.wait_for_unshard
    group.wait_for_unshard = lambda: wrapper(module, original)


def world_size_one(module: nn.Module) -> bool:
    """Whether FSDP2 skips the all-gather for this group (its world-size-1 path)."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo

    group = param_group(module)
    if not isinstance(group.mesh_info, FSDPMeshInfo):
        return True
    return group._all_gather_process_group.size() == 1


def training_phase(module: nn.Module) -> str | None:
    """``"forward"`` or ``"backward"`` while FSDP2 unshards the group for that pass, else None
    (an explicit ``unshard()``, a state dict)."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState

    state = param_group(module)._training_state
    if state == TrainingState.FORWARD:
        return "forward"
    if state == TrainingState.PRE_BACKWARD:
        return "backward"
    return None


def unshard_pending(module: nn.Module) -> bool:
    """Whether ``wait_for_unshard`` will unshard (an ``unshard`` ran and was not waited on)."""
    return bool(param_group(module)._all_gather_result)


def host_shards(module: nn.Module) -> list[torch.Tensor]:
    """The group's padded local shards, as ``all_gather_inputs`` reads them (1-D)."""
    return [fp._sharded_param_data for fp in param_group(module).fsdp_params]


@contextmanager
def staged_shards(module: nn.Module, bufs: list[torch.Tensor]):
    """Within the block, the group's shards read as the device copies ``bufs`` (same order as
    :func:`host_shards`) and are not moved again; restored on exit, before FSDP2's
    reduce-scatter reads ``offload_to_cpu`` to copy the gradients to the host."""
    params = list(param_group(module).fsdp_params)
    if len(bufs) != len(params):
        raise ValueError("one staged copy per FSDP parameter")
    saved = [(fp._sharded_param_data, fp.offload_to_cpu) for fp in params]
    try:
        for fp, b in zip(params, bufs):
            fp._sharded_param_data, fp.offload_to_cpu = b, False
        yield
    finally:
        for fp, (data, off) in zip(params, saved):
            fp._sharded_param_data, fp.offload_to_cpu = data, off
