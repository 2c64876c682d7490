"""Device shards updated during backward: ``HostAdamW(overlap=True, device_overlap=True)``.

Without it every device shard keeps its gradient until ``step()``: at the end of backward the
step holds the gradients of every layer at once, which is where an FSDP2 step of a model
trained on one device peaks (docs/steps.md: the bottom layer's backward and the optimizer
step). With it, a device shard is updated as soon as its gradient is final and the gradient is
freed, so the end of backward holds the gradients of the groups not yet reduced only:

* an FSDP2 group: at the end of the group's ``post_backward`` (``_fsdp_compat.on_reduced``),
  all its device shards in one fused call (``adamw_kernel.device_update``, the kernel ``step()``
  runs), on a side stream that first waits for the group's reduce (its post-reduce event, no
  host synchronization), so the next layers' backward is not held behind it;
* any other parameter: its post-accumulate-grad hook, the same way.

A group whose module runs more than once before a backward (a shared block) runs its
``post_backward`` once per use: its shards are updated at a landing only once its
``post_backward`` has run as many times as its module ran forward since its last update
(forwards counted outside backward: a checkpoint's recomputation is no use). No update then
reads part of a gradient, and no later use's backward reads a shard being updated; where the
counts never meet (a use without a backward), ``step()`` updates the shards. An
FSDP2 parameter outside every watched group is refused by name (``model=`` names them).

A freed gradient's memory is recorded on the side stream before the reference is dropped, so
the caching allocator does not hand it to the next reduce while the update still reads it.
``step()`` (:meth:`DeviceOverlap.finish`) makes the current stream wait for the side stream,
then updates what was not updated yet. The numbers are those of ``step()``'s one fused call:
the fused kernel is elementwise per tensor.

With ``accumulation_steps = n`` a shard is updated at every ``n``-th landing of its gradient
(the micro-batches before accumulate into ``.grad`` as usual). What overlap rules out, it rules
out here too: global-norm clipping (no gradient is left to measure), and reading ``.grad``
after backward (device shards have none). Skipping ``step()`` no longer skips the update, so
``torch.amp.GradScaler`` (its inf check) and loss-spike skips cannot work with it, and
``torch.nn.utils.clip_grad_norm_`` would see no device gradient.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import torch

from memopt import _torch_compat as compat
from memopt.errors import ConfigError
from memopt.params import _fsdp_compat as fc
from memopt.params.adamw_kernel import device_update


class DeviceOverlap:
    """The device half of ``HostAdamW``'s overlap (see the module docstring): ``modules`` are
    the ``fully_shard``-ed modules whose groups are watched; every other parameter of the
    optimizer that lives on a device and needs a gradient gets its own hook."""

    def __init__(self, opt, modules: Iterable[torch.nn.Module]) -> None:
        self.opt = opt
        self.updates = 0  # device shards updated during backward (a counter)
        self._streams: dict[torch.device, torch.cuda.Stream] = {}
        self._used: set[torch.device] = set()  # side streams with work current has not waited
        self._hooks = []
        self._uses: dict[int, int] = {}  # forwards of each watched group since its update
        self._calls: dict[int, int] = {}  # its post_backward calls then (_fsdp_compat)
        self._modules: list[torch.nn.Module] = []
        watched = set()
        for mod in modules:
            if fc.is_fsdp(mod) and fc.group_params(mod):
                watched.update(id(p) for p in fc.group_params(mod))
                self._hooks.append(fc.on_reduced(mod, partial(self._on_group, mod)))
                self._hooks.append(mod.register_forward_pre_hook(self._on_forward))
                self._modules.append(mod)
        for p in opt.state:
            if id(p) in watched or not p.requires_grad or opt._on_host(p):
                continue
            if fc.is_dtensor(p):
                raise ConfigError(
                    "HostAdamW(device_overlap=True): an FSDP2 parameter of shape "
                    f"{tuple(p.shape)} is in no watched group; pass model= (the FSDP2-sharded "
                    "model) or offload= (the record of shard_with_offload)"
                )
            self._hooks.append(p.register_post_accumulate_grad_hook(self._on_param))

    # ---- the hooks --------------------------------------------------------------------------
    @torch.compiler.disable  # a forward hook runs eagerly: docs/params.md
    def _on_forward(self, module, args) -> None:
        if torch.is_grad_enabled() and not compat.in_backward():
            self._uses[id(module)] = self._uses.get(id(module), 0) + 1

    def _on_group(self, module, params) -> None:
        calls = fc.post_backward_calls(module) - self._calls.get(id(module), 0)
        if calls < self._uses.get(id(module), 1):  # another use's gradient is still to come
            return
        self._reset(module)
        self._update(params, module)

    def _reset(self, module) -> None:
        self._uses[id(module)] = 0
        self._calls[id(module)] = fc.post_backward_calls(module)

    def _on_param(self, p: torch.Tensor) -> None:
        self._update([p], None)

    def _due(self, p: torch.Tensor) -> bool:
        """Whether ``p``'s gradient landing now is the one its update waits for."""
        if p not in self.opt.state or self.opt._on_host(p) or p.grad is None:
            return False
        return self.opt._landed(p)  # HostAdamW's count of micro-batches

    def _update(self, params, module) -> None:
        """Update ``params`` whose gradients are final (``module``: the FSDP2 group that
        reduced them, None for a parameter's own hook) and free their gradients."""
        due = [p for p in params if self._due(p)]
        if not due:
            return
        by_group: dict[int, list] = {}
        for p in due:
            by_group.setdefault(id(self.opt._group_of[id(p)]), []).append(p)
        dev = fc.local(due[0]).device
        stream = self._stream(dev)
        if stream is None:
            self._run(by_group)
        else:
            if module is not None:  # the group's reduce: the gradients it wrote
                fc.wait_for_reduced(module, stream)
            stream.wait_stream(torch.cuda.current_stream(dev))  # the backward that made them
            with torch.cuda.stream(stream):
                self._run(by_group)
            for p in due:
                fc.local(p.grad).record_stream(stream)
            self._used.add(dev)
        for p in due:
            p.grad = None
            self.opt._done.add(id(p))
        self.updates += len(due)

    def _run(self, by_group: dict[int, list]) -> None:
        for params in by_group.values():
            device_update(params, self.opt._group_of[id(params[0])], self.opt.state)

    def _stream(self, dev: torch.device) -> torch.cuda.Stream | None:
        if dev.type != "cuda":
            return None
        if dev not in self._streams:
            self._streams[dev] = torch.cuda.Stream(dev)
        return self._streams[dev]

    # ---- the optimizer's calls --------------------------------------------------------------
    def finish(self, new_step: bool = False) -> None:
        """What runs next on the current stream (the rest of the step, the next forward's
        all-gathers, a state dict's reads) waits for the updates made during backward.
        ``new_step`` (``step()`` begins): the uses counted so far are done with."""
        for dev in self._used:
            torch.cuda.current_stream(dev).wait_stream(self._streams[dev])
        self._used.clear()
        for mod in self._modules if new_step else ():
            self._reset(mod)

    def clear(self) -> None:
        """``zero_grad``: the uses counted so far are dropped with the gradients (HostAdamW
        drops its count of micro-batches)."""
        for mod in self._modules:
            self._reset(mod)

    def close(self) -> None:
        self.finish()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()


class _Off:
    """No device shard is updated during backward (the default)."""

    updates = 0

    def finish(self, new_step: bool = False) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


def device_overlap_for(opt, device_overlap: bool, modules, model) -> DeviceOverlap | _Off:
    """HostAdamW's device half: off, or watching the FSDP2 groups of ``modules`` (the offload
    record's) and of ``model`` (a model sharded without one)."""
    if not device_overlap:
        return _Off()
    if not opt.overlap:
        raise ConfigError(
            "HostAdamW(device_overlap=True) needs overlap=True: device shards updated during "
            "backward rule out what overlap rules out (clip_grad_norm_, .grad after backward)"
        )
    mods = list(modules) + ([m for m in model.modules() if fc.is_fsdp(m)] if model else [])
    return DeviceOverlap(opt, list({id(m): m for m in mods}.values()))
