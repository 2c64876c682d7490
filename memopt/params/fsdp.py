"""Parameter offload through FSDP2: ``fully_shard`` with a host or device policy per group.

    model --find_layers--> groups (each layer, the output head when it is not tied, the root)
          --plan_host_groups(bytes, f)--> HostPlan (which groups live on the host)
          --fully_shard(layer, offload_policy=CPUOffloadPolicy | OffloadPolicy)--> ... root
          --> FsdpOffload (the plan, fp32 masters of bf16 host shards, report rows)

FSDP2 does the moving: host groups' shards live in (pinned) host memory, are copied to the device
for the all-gather before use, and their reduced gradients are copied back to the host. A model
the user already sharded keeps its groups and mesh; memopt moves the chosen groups' shards to the
host (:func:`memopt.params._fsdp_compat.move_group_to_host`).

With ``host_dtype=torch.bfloat16`` (or ``"auto"`` at world size 1 when ``mp_policy.param_dtype``
is bf16), the host groups are cast to bf16 *before* sharding: their shards, the all-gather copies
and the gradients are 2 B/param. The fp32 values are kept as masters (sliced to this rank's
shard) for :class:`memopt.params.HostAdamW`, which updates them and writes the bf16 shard back.
At world size 1 this is exact: the compute casts the fp32 shard to bf16 anyway, the gradient is
bf16, a reduction over one rank is the identity, and HostAdamW accumulates micro-batches and clips
in fp32 (:mod:`memopt.params.grad_acc`). So the host groups also reduce in bf16 (no fp32 copy of
each layer's gradient on the device; measured 0.47 GiB lower peak and 38 ms faster per step on
the benchmark, docs/params.md). It is opt-in: clipping with torch's ``clip_grad_norm_`` (as HF
Trainer does) would scale the bf16 gradient (``HostAdamW.clip_grad_norm_`` is exact), and
another optimizer than HostAdamW cannot step bf16 host shards (it raises).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)
from torch.distributed.tensor import distribute_tensor
from torch.optim.optimizer import register_optimizer_step_pre_hook

from memopt.config import parse_param_offload
from memopt.errors import ConfigError
from memopt.params import _fsdp_compat as fc
from memopt.params.auto import AutoOffload
from memopt.params.host_plan import HostPlan, plan_host_groups, share_for_budget
from memopt.params.layers import find_layers, find_output_head
from memopt.params.prefetch import HostPrefetch
from memopt.params.rates import HostRates, host_rates

log = logging.getLogger("memopt")


@dataclass
class FsdpOffload:
    """What :func:`shard_with_offload` did: the plan, the groups and the masters to hand over."""

    plan: HostPlan
    groups: list[tuple[str, nn.Module]]
    pin_memory: bool
    host_dtype: torch.dtype | None
    user_sharded: bool
    masters: dict[int, torch.Tensor] = field(default_factory=dict)
    """``id(sharded param) -> fp32 local shard`` for host params cast to ``host_dtype``."""

    @property
    def host_parameters(self) -> list[nn.Parameter]:
        return [
            p
            for (_, m), host in zip(self.groups, self.plan.on_host)
            if host and fc.is_fsdp(m)
            for p in fc.group_params(m)
        ]

    optimizer: object = None
    cuda: bool = False  # read by memopt's report; FSDP2 moves the bytes, not memopt
    auto: AutoOffload | None = None
    """The automatic placement (``param_offload="auto"`` or bytes); None for a given share."""
    prefetch: int | None = None
    """FSDP2's prefetch depth set by memopt (None: FSDP2's default of one)."""
    staging: HostPrefetch | None = None
    """At world size 1 on CUDA: host shards staged on the device ahead of use."""
    head: str | None = None
    """The output head's group name when it is a group of its own (see ``find_output_head``)."""
    host_reduce_dtype: torch.dtype | None = None
    """The dtype host groups reduce gradients in (None: FSDP2's default, the param dtype)."""

    def _ready(self, module: nn.Module) -> None:
        """Block until ``module``'s host updates have run (before its shards are staged)."""
        wait_for = getattr(self.optimizer, "wait_for", None)
        if wait_for is not None:
            wait_for(fc.group_params(module))

    def grow(self, plan: HostPlan, prefetch: int) -> int:
        """Move the groups ``plan`` adds to the host (shards now, the attached optimizer's
        moments with them) and set the prefetch depth; returns how many groups moved."""
        moved, params = 0, []
        for (_, mod), was, now in zip(self.groups, self.plan.on_host, plan.on_host):
            if now and not was and fc.is_fsdp(mod):
                fc.move_group_to_host(mod, self.pin_memory)
                params += fc.group_params(mod)
                moved += 1
        self.plan = plan
        if params and self.optimizer is not None:
            self.optimizer.adopt_host(params)
        if prefetch > 1:
            set_prefetch([m for _, m in self.groups[:-1] if fc.is_fsdp(m)], prefetch)
            self.prefetch = prefetch
            if self.staging is not None:
                self.staging.depth = prefetch
        return moved

    def take_master(self, p: torch.Tensor) -> torch.Tensor | None:
        """The fp32 master of a bf16 host shard (handed over once, then forgotten)."""
        if hasattr(p, MASTER_FLAG):
            delattr(p, MASTER_FLAG)
        return self.masters.pop(id(p), None)

    def attach_optimizer(self, optimizer) -> None:
        self.optimizer = optimizer

    def placement_rows(self) -> list[dict]:
        """One row per group: this rank's local shard bytes and where they live (and a note
        row with the automatic placement's inputs and choice)."""
        rows = []
        if self.auto is not None:
            rows.append({"name": self.auto.summary(), "kind": "note", "param_bytes": 0})
            rows[-1].update(where="", host=False, pinned=False, auto=self.auto.to_dict())
        for (name, mod), host in zip(self.groups, self.plan.on_host):
            params = fc.group_params(mod) if fc.is_fsdp(mod) else []
            locs = [fc.local(p) for p in params]
            rows.append(
                {
                    "name": name or "(root)",
                    "kind": "other" if mod is self.groups[-1][1] or name == self.head else "layer",
                    "param_bytes": sum(t.numel() * t.element_size() for t in locs),
                    "where": "cpu" if host else _where(locs),
                    "host": host,
                    "pinned": bool(locs) and all(t.is_pinned() for t in locs if t.numel()),
                    "slot": None,
                }
            )
        return rows


def _where(tensors: list[torch.Tensor]) -> str:
    dev = tensors[0].device.type if tensors else "cpu"
    return "gpu" if dev == "cuda" else dev


def ensure_process_group(device: torch.device | str | None = None) -> None:
    """A world-size-1 process group when none exists (FSDP2 needs one; no port is opened)."""
    if dist.is_initialized():
        return
    dev = torch.device(device) if device is not None else None
    cuda = dev.type == "cuda" if dev is not None else torch.cuda.is_available()
    backend = "cuda:nccl,cpu:gloo" if cuda else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def _nbytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def _host_dtype(host_dtype, mp_policy: MixedPrecisionPolicy | None, world: int):
    """``"auto"``: ``mp_policy.param_dtype`` when it is 16-bit and the world has one rank (where
    16-bit shards change no number); ``"16bit"``: that dtype at any world size; else as given."""
    if host_dtype not in ("auto", "16bit"):
        if host_dtype is None or isinstance(host_dtype, torch.dtype):
            return host_dtype
        raise ValueError(
            f"host_dtype={host_dtype!r} must be a torch dtype, None, 'auto' or '16bit'"
        )
    if mp_policy is None or mp_policy.param_dtype in (None, torch.float32):
        return None
    if host_dtype == "auto" and world > 1:
        return None
    return mp_policy.param_dtype


def _host_policy(mp_policy, hd: torch.dtype | None, world: int):
    """Host groups' policy: at world size 1 a 16-bit shard's gradient is reduced in its own
    dtype (the reduction is the identity; an fp32 one only adds a device copy per layer)."""
    if mp_policy is None or hd is None or world > 1 or mp_policy.reduce_dtype in (None, hd):
        return mp_policy
    return dataclasses.replace(mp_policy, reduce_dtype=hd)


def shard_with_offload(
    model: nn.Module,
    fraction: float | int | str,
    *,
    layers_prefix: str | None = None,
    mesh=None,
    mp_policy: MixedPrecisionPolicy | None = None,
    host_dtype: torch.dtype | None | str = None,
    pin_memory: bool | None = None,
    reshard_after_forward: bool = True,
    prefetch: int | None = None,
    rates: HostRates | None = None,
    stage_ahead: bool = False,
) -> FsdpOffload:
    """Shard ``model`` with FSDP2 (or take its existing sharding) so that ``fraction`` of the
    parameter bytes live on the host; returns the :class:`FsdpOffload` record.

    ``fraction="auto"`` or bytes (``"8GiB"``: at most that much of each rank's parameter shards
    on the device) start with the share memory needs and choose more after the first steps
    from the measured step and ``rates`` (:func:`memopt.params.rates.host_rates` when None;
    see :mod:`memopt.params.auto`).

    ``mesh`` / ``mp_policy`` / ``reshard_after_forward`` go to every ``fully_shard`` call.
    ``pin_memory`` defaults to whether CUDA is available. ``host_dtype=None`` (default) keeps the
    model's dtype on the host. ``"auto"`` casts host groups to ``mp_policy.param_dtype`` when that
    is 16-bit and the world has one rank (fp32 masters kept for :class:`HostAdamW`, which
    accumulates micro-batches and clips in fp32, :mod:`memopt.params.grad_acc`; the host groups
    then also reduce in that dtype): the same numbers as fp32 shards with 2 B/param host copies,
    as long as gradients are clipped with ``HostAdamW.clip_grad_norm_`` (torch's
    ``clip_grad_norm_`` scales the bf16 ``.grad``: a warning). At world size > 1 ``"auto"`` keeps
    the model's dtype, since FSDP2 would round the fp32-reduced gradient to 16 bits. ``"16bit"``
    or a dtype casts at any world size (accepting that rounding). Another optimizer than
    HostAdamW stepping 16-bit host shards raises ConfigError.
    ``prefetch=k`` all-gathers ``k`` layer groups ahead in forward and backward (FSDP2's
    default is one; :func:`memopt.params.host_plan.prefetch_depth` sizes ``k`` from the
    measured PCIe rate). Build the optimizer after this call.

    At world size 1 on CUDA FSDP2 copies a host group's shards on the compute stream when the
    group runs; ``stage_ahead=True`` copies the next ``prefetch`` (default one) host groups on
    a side stream while the current one computes (:mod:`memopt.params.prefetch`; opt-in: it
    costs up to that many groups' shards of GPU memory and measured within noise on
    launch-bound steps).
    """
    ensure_process_group(mesh.device_type if mesh is not None else None)
    pin = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
    mode = parse_param_offload("param_offload", fraction)
    cuda = torch.cuda.is_available()
    device = mesh.device_type if mesh is not None else ("cuda" if cuda else "cpu")
    world = mesh.size() if mesh is not None else dist.get_world_size()
    if not isinstance(mode, float) and rates is None:
        rates = host_rates(device)
    start = partial(_start, mode, world=world, rates=rates)
    hd = _host_dtype(host_dtype, mp_policy, world)
    if any(fc.is_fsdp(m) for m in model.modules()):
        if host_dtype != "auto" and host_dtype is not None:
            raise ValueError(
                f"host_dtype={host_dtype!r} needs an unsharded model: this one is already "
                "sharded with fully_shard, and its DTensor parameters' dtype is fixed"
            )
        rec = _offload_sharded(model, start, pin)
    else:
        rfa = reshard_after_forward
        rec = _shard(model, start, pin, layers_prefix, mesh, mp_policy, hd, rfa, world)
    if prefetch is not None:
        set_prefetch([m for _, m in rec.groups[:-1] if fc.is_fsdp(m)], prefetch)
        rec.prefetch = prefetch
    if stage_ahead and world == 1 and device == "cuda":
        rec.staging = HostPrefetch([m for _, m in rec.groups], prefetch or 1, rec._ready)
    elif stage_ahead:
        log.warning(
            "memopt: stage_ahead=True applies at world size 1 on CUDA only (here: world size "
            "%d on %s, where FSDP2's all-gather streams prefetch); nothing is staged",
            world,
            device,
        )
    return rec


def _start(
    mode: float | int | str, sizes: list[int], *, world: int, rates: HostRates | None
) -> tuple[float, AutoOffload | None]:
    """The share to place now and, for ``"auto"`` or bytes, the automatic placement."""
    if isinstance(mode, float):
        return mode, None
    budget = None if mode == "auto" else int(mode)
    need = 0.0 if budget is None else share_for_budget(sum(sizes) // world, budget)
    return need, AutoOffload(need=need, rates=rates, budget_bytes=budget)


def _shard(model, start, pin, layers_prefix, mesh, mp_policy, hd, rfa, world):
    """An unsharded model: ``fully_shard`` each layer group with a host or device policy."""
    layers = find_layers(model, layers_prefix)
    head = find_output_head(model, layers)
    groups = [*layers, *head, ("", model)]
    layer_ids = {id(p) for _, m in groups[:-1] for p in m.parameters()}
    root_bytes = _nbytes(p for p in model.parameters() if id(p) not in layer_ids)
    sizes = [_nbytes(m.parameters()) for _, m in groups[:-1]] + [root_bytes]
    fraction, auto = start(sizes)
    plan = plan_host_groups([n for n, _ in groups], sizes, fraction)
    rec = FsdpOffload(plan, groups, pin, hd, user_sharded=False, auto=auto)
    rec.head = head[0][0] if head else None
    kw = {"mesh": mesh, "reshard_after_forward": rfa}
    mp_host = _host_policy(mp_policy, hd, world)
    rec.host_reduce_dtype = mp_host.reduce_dtype if mp_host is not None else None
    for (_, mod), host in zip(groups, plan.on_host):
        policy = CPUOffloadPolicy(pin_memory=pin) if host else OffloadPolicy()
        full = _cast_for_host(mod, hd) if host else {}
        mp = mp_host if host else mp_policy
        fully_shard(mod, offload_policy=policy, **kw, **({"mp_policy": mp} if mp else {}))
        for key, p in fc.keyed_group_params(mod):
            if key in full:
                rec.masters[id(p)] = _local_master(full.pop(key), p)
    rec.cuda = any(p.is_cuda for p in model.parameters())
    _guard_masters(p for p in model.parameters() if id(p) in rec.masters)
    return rec


#: Attribute set on a 16-bit host shard whose fp32 master waits in its record for HostAdamW.
MASTER_FLAG = "_memopt_master_waits"
_HOOK: list = []  # the global optimizer step pre-hook's handle, once registered


def _guard_masters(params) -> None:
    """16-bit host shards train only through HostAdamW (it takes their fp32 masters): another
    optimizer stepping them would update the bf16 shard itself, so its step raises."""
    for p in params:
        setattr(p, MASTER_FLAG, True)
    if not _HOOK:
        _HOOK.append(register_optimizer_step_pre_hook(_check_masters))


def _check_masters(opt, args, kwargs) -> None:
    """The global optimizer step pre-hook (registered once): see :func:`_guard_masters`."""
    mine = sum(getattr(p, MASTER_FLAG, False) for g in opt.param_groups for p in g["params"])
    if mine:
        raise ConfigError(
            f"{type(opt).__name__} steps {mine} bf16 host shard(s) made by shard_with_offload "
            "(host_dtype='auto', '16bit' or a 16-bit dtype): their fp32 masters are kept for memopt.HostAdamW(model.parameters(), offload=rec), which "
            "updates them and writes the bf16 shard back. Use HostAdamW, or shard with "
            "host_dtype=None (fp32 host shards) for another optimizer"
        )


def set_prefetch(layers: list[nn.Module], depth: int) -> None:
    """Each ``fully_shard``-ed layer all-gathers the next ``depth`` layers in forward and the
    previous ``depth`` in backward (FSDP2's explicit prefetch lists)."""
    if depth < 1:
        raise ValueError(f"prefetch={depth} must be >= 1")
    for i, mod in enumerate(layers):
        mod.set_modules_to_forward_prefetch(layers[i + 1 : i + 1 + depth])
        mod.set_modules_to_backward_prefetch(layers[max(0, i - depth) : i][::-1])


def _cast_for_host(mod: nn.Module, dtype: torch.dtype | None) -> dict:
    """Cast the group's unsharded floating parameters to ``dtype`` in place; return their fp32
    values keyed by ``(id(owner module), name)`` (see ``keyed_group_params``)."""
    if dtype is None:
        return {}
    out = {}
    for owner in mod.modules():
        for name, p in owner.named_parameters(recurse=False):
            if fc.is_dtensor(p) or not p.is_floating_point() or p.dtype == dtype:
                continue
            out[(id(owner), name)] = p.detach().float().clone()
            p.data = p.data.to(dtype)
    return out


def _local_master(full: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """This rank's shard of ``full``, chunked as FSDP2 chunked ``p`` (no communication)."""
    shard = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
    return fc.local(shard).to("cpu").contiguous()


def _offload_sharded(model: nn.Module, start, pin: bool) -> FsdpOffload:
    """A model the user sharded: place its groups (the model itself last when it is one)."""
    mods = [(n, m) for n, m in model.named_modules() if fc.is_fsdp(m) and m is not model]
    root = (("", model),) if fc.is_fsdp(model) else ()
    groups = [*mods, *root]
    sizes = [_nbytes(fc.group_params(m)) for _, m in groups]
    if not root:  # the model's own parameters are not sharded: nothing to place
        groups.append(("(not sharded)", model))
        sizes.append(0)
    fraction, auto = start(sizes)
    plan = plan_host_groups([n for n, _ in groups], sizes, fraction)
    for (_, mod), host in zip(groups, plan.on_host):
        if host and fc.is_fsdp(mod):
            fc.move_group_to_host(mod, pin)
    already = tuple(fc.is_fsdp(m) and fc.group_on_host(m) for _, m in groups)
    plan = HostPlan(plan.names, plan.group_bytes, already, plan.fraction)
    rec = FsdpOffload(plan, groups, pin, None, user_sharded=True, auto=auto)
    rec.cuda = any(p.is_cuda for p in model.parameters())
    return rec


def offload_parameters(
    model: nn.Module,
    fraction: float | int | str,
    *,
    layers_prefix: str | None = None,
    device: torch.device | str | None = None,
    mp_policy: MixedPrecisionPolicy | None = None,
    rates: HostRates | None = None,
    host_dtype: torch.dtype | None | str = None,
) -> FsdpOffload:
    """``memopt.optimize(..., param_offload=f)``: :func:`shard_with_offload` (a world-size-1
    process group is created when none exists; ``device`` picks its backend)."""
    ensure_process_group(device)
    return shard_with_offload(
        model,
        fraction,
        layers_prefix=layers_prefix,
        mp_policy=mp_policy,
        rates=rates,
        host_dtype=host_dtype,
    )
