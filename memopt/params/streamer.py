"""Layer (weight) offload: stream the layers' parameters host -> GPU ahead of use.

Per streamed layer ``i`` in slot ``s`` (hooks; ``T`` is the transfer stream, ``C`` compute)::

    fwd pre-hook(i):   C waits load(i)            ; T waits C; T: load(next streamed) -> its slot
    fwd post-hook(i):  output.register_hook(bwd(i))
    bwd(i):            C waits load(i) (reload)   ; T waits C; T: load(previous streamed)

A layer's parameters are permanently views into its arena slot (``memopt.params.arena``), so
"evict" is simply letting the next owner of the slot overwrite it; reloading into the same slot
before backward makes every saved view of a weight read the right bytes again. Without CUDA the
same code runs with CPU "device" tensors and synchronous copies, which is what CI tests.

The hooks are ``torch.compiler.disable``-d: under ``torch.compile(model)`` dynamo graph-breaks at
each hook, so the compiled regions are the layers' bodies and the hooks run eagerly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from memopt._torch_compat import in_backward
from memopt.params.arena import SlotArena, layer_layout
from memopt.params.placement import LayerOffloadPlan, TensorSlice, plan_layer_offload


def find_layers(model: nn.Module, prefix: str | None = None) -> list[tuple[str, nn.Module]]:
    """The repeated layers: children of ``prefix`` or of the ModuleList holding most parameters."""
    if prefix is not None:
        try:
            container = model.get_submodule(prefix)
        except AttributeError:
            raise ValueError(f"layers_prefix={prefix!r} names no submodule of the model") from None
        if not isinstance(container, nn.ModuleList | nn.Sequential):
            raise ValueError(
                f"layers_prefix={prefix!r} is a {type(container).__name__}, not a list"
            )
        return [(f"{prefix}.{n}", m) for n, m in container.named_children()]
    best, best_numel = None, -1
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 0:
            numel = sum(p.numel() for p in mod.parameters())
            if numel > best_numel:
                best, best_numel = name, numel
    if best is None:
        raise ValueError("the model has no nn.ModuleList of layers; pass layers_prefix")
    return find_layers(model, best)


@dataclass
class _Layer:
    name: str
    module: nn.Module
    params: list[nn.Parameter]
    layout: list[TensorSlice]
    slot: int | None = None
    host: list[torch.Tensor] = field(default_factory=list)
    ready: object = None  # CUDA event of the last load, None once waited on


class ParamOffloadHandle:
    """Installed by :func:`apply_param_offload`; owns the arena, host copies, hooks and stats."""

    def __init__(
        self,
        model: nn.Module,
        layers: list[tuple[str, nn.Module]],
        plan: LayerOffloadPlan,
        device: torch.device,
        *,
        allocator: str = "arena",
        keep_grads: bool = False,
    ) -> None:
        if allocator not in ("arena", "torch"):
            raise ValueError(f"allocator={allocator!r} must be 'arena' or 'torch'")
        self.model, self.plan, self.device, self.allocator = model, plan, device, allocator
        self.keep_grads = keep_grads
        self.cuda = device.type == "cuda"
        self.h2d_bytes = 0
        self.loads = 0
        self.optimizer = None  # a CPUAdamW attached with attach_optimizer
        self._host_version = 0
        self._hooks: list = []
        self._layers: list[_Layer] = []
        for (name, mod), slot in zip(layers, plan.slot_of):
            params = list(mod.parameters())
            layout, _ = layer_layout(params)
            self._layers.append(_Layer(name, mod, params, layout, slot))
        self._order = [i for i, s in enumerate(plan.streamed) if s]
        self._pos = {i: q for q, i in enumerate(self._order)}
        self._owner: list[tuple[int, int] | None] = [None] * plan.slots  # (layer, host version)
        self._streamed_ids = {id(p) for i in self._order for p in self._layers[i].params}
        self._check_not_shared()
        self.transfer = torch.cuda.Stream(device) if self.cuda else None
        self.arena = SlotArena(plan.slots, plan.slot_bytes, device) if self._order else None
        self._place()
        self._install_hooks()

    # ---- setup -------------------------------------------------------------------------------
    def _check_not_shared(self) -> None:
        layer_mods = {id(m) for i in self._order for m in self._layers[i].module.modules()}
        for mod in self.model.modules():
            if id(mod) in layer_mods:
                continue
            for p in mod.parameters(recurse=False):
                if id(p) in self._streamed_ids:
                    raise ValueError(
                        "a streamed layer shares a parameter with a module outside it "
                        "(tied weights); pass layers_prefix or lower param_offload"
                    )

    def _place(self) -> None:
        for mod in self.model.modules():
            for p in mod.parameters(recurse=False):
                if id(p) not in self._streamed_ids and p.device != self.device:
                    p.data = p.data.to(self.device)
            for name, b in mod.named_buffers(recurse=False):
                if b is not None and b.device != self.device:
                    mod._buffers[name] = b.to(self.device)
        pin = self.cuda
        if self.allocator == "torch" and self._order:
            self._dummy = torch.empty(self.plan.slot_bytes, dtype=torch.uint8, device=self.device)
        for i in self._order:
            layer = self._layers[i]
            for p in layer.params:
                h = torch.empty(p.shape, dtype=p.dtype, pin_memory=pin)
                h.copy_(p.data)
                layer.host.append(h)
            if self.allocator == "arena":
                self._bind(layer, self.arena.buffer, layer.slot * self.plan.slot_bytes)
            else:
                self._bind(layer, self._dummy, 0)

    def _bind(self, layer: _Layer, buf: torch.Tensor, base: int) -> None:
        for p, piece in zip(layer.params, layer.layout):
            off = base + piece.offset
            p.data = buf[off : off + piece.nbytes].view(p.dtype).view(p.shape)

    def _install_hooks(self) -> None:
        for i in self._order:
            mod = self._layers[i].module
            self._hooks.append(mod.register_forward_pre_hook(_disabled(self._pre, i)))
            self._hooks.append(mod.register_forward_hook(_disabled(self._post, i)))
            for p in self._layers[i].params:
                if p.requires_grad and not self.keep_grads:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._check_grad))

    # ---- transfers ---------------------------------------------------------------------------
    def _loaded(self, i: int) -> bool:
        return self._owner[self._layers[i].slot] == (i, self._host_version)

    def _issue_load(self, i: int) -> None:
        layer = self._layers[i]
        s = layer.slot
        prev = self._owner[s]
        if self.allocator == "torch":
            if prev is not None and prev[0] != i:
                self._bind(self._layers[prev[0]], self._dummy, 0)
            if self.cuda:
                with torch.cuda.stream(self.transfer):
                    buf = torch.empty(self.plan.slot_bytes, dtype=torch.uint8, device=self.device)
                buf.record_stream(torch.cuda.current_stream(self.device))
            else:
                buf = torch.empty(self.plan.slot_bytes, dtype=torch.uint8, device=self.device)
            raw, base = buf.data, 0
            self._bind(layer, buf, 0)
        else:
            raw, base = self.arena.raw, s * self.plan.slot_bytes
        if self.cuda:
            # The slot's previous owner is done with it once everything already queued on C is.
            self.transfer.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.transfer):
                self._copy_in(layer, raw, base)
                layer.ready = torch.cuda.Event()
                layer.ready.record(self.transfer)
        else:
            self._copy_in(layer, raw, base)
        self._owner[s] = (i, self._host_version)
        self.loads += 1
        self.h2d_bytes += sum(piece.nbytes for piece in layer.layout)

    @staticmethod
    def _copy_in(layer: _Layer, raw: torch.Tensor, base: int) -> None:
        for h, piece in zip(layer.host, layer.layout):
            off = base + piece.offset
            raw[off : off + piece.nbytes].view(h.dtype).view(h.shape).copy_(h, non_blocking=True)

    def _ensure(self, i: int) -> None:
        if not self._loaded(i):
            self._issue_load(i)
        layer = self._layers[i]
        if layer.ready is not None:
            torch.cuda.current_stream(self.device).wait_event(layer.ready)
            layer.ready = None

    def _prefetch(self, i: int, direction: int) -> None:
        q = self._pos[i]
        for t in range(1, self.plan.slots):
            q2 = q + direction * t
            if 0 <= q2 < len(self._order) and not self._loaded(self._order[q2]):
                self._issue_load(self._order[q2])

    # ---- hooks -------------------------------------------------------------------------------
    def _pre(self, i: int, module: nn.Module, args: tuple) -> None:
        self._ensure(i)
        if not in_backward():
            self._prefetch(i, +1)

    def _post(self, i: int, module: nn.Module, args: tuple, output) -> None:
        if in_backward() or not torch.is_grad_enabled():
            return
        outs = [t for t in _tensors(output) if t.requires_grad]
        if len(outs) == 1:
            outs[0].register_hook(_disabled(self._bwd, i))
        elif outs:
            torch.autograd.graph.register_multi_grad_hook(outs, _disabled(self._bwd, i), mode="any")

    def _bwd(self, i: int, *grads) -> None:
        self._ensure(i)
        self._prefetch(i, -1)

    def _check_grad(self, p: torch.Tensor) -> None:
        if self.optimizer is None or not self.optimizer.owns(p):
            raise RuntimeError(
                "a parameter of a streamed (offloaded) layer received a gradient, but no "
                "memopt.CPUAdamW owns it: its device copy is a shared slot, so a GPU optimizer "
                "would update bytes that are overwritten. Build memopt.CPUAdamW(params, "
                "param_offload=handle) or freeze the streamed layers."
            )

    # ---- API for the optimizer and the report ------------------------------------------------
    def attach_optimizer(self, optimizer) -> None:
        self.optimizer = optimizer

    def host_tensor(self, p: torch.Tensor) -> torch.Tensor | None:
        """The host copy of a streamed parameter (its real value), else None."""
        if id(p) not in self._streamed_ids:
            return None
        for i in self._order:
            for q, h in zip(self._layers[i].params, self._layers[i].host):
                if q is p:
                    return h
        return None

    def mark_host_updated(self) -> None:
        """Host copies changed (an optimizer step): every slot must be reloaded before use."""
        self._host_version += 1

    def streamed_parameters(self) -> Iterator[nn.Parameter]:
        for i in self._order:
            yield from self._layers[i].params

    def placement_rows(self) -> list[dict]:
        """One row per layer plus the ring and the other parameters (bytes, where)."""
        rows = []
        for layer, streamed in zip(self._layers, self.plan.streamed):
            rows.append(
                {
                    "name": layer.name,
                    "kind": "layer",
                    "param_bytes": sum(piece.nbytes for piece in layer.layout),
                    "where": "cpu" if streamed else "gpu",
                    "slot": layer.slot,
                }
            )
        if self._order:
            rows.append(
                {
                    "name": "(ring slots)",
                    "kind": "arena",
                    "param_bytes": self.plan.ring_bytes,
                    "where": "gpu",
                    "slot": None,
                }
            )
        layer_ids = {id(p) for layer in self._layers for p in layer.params}
        other = sum(
            p.numel() * p.element_size() for p in self.model.parameters() if id(p) not in layer_ids
        )
        rows.append(
            {
                "name": "(other params)",
                "kind": "other",
                "param_bytes": other,
                "where": "gpu",
                "slot": None,
            }
        )
        return rows

    def remove(self) -> None:
        """Remove the hooks and give every streamed parameter its own device tensor again."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self.transfer)
        for i in self._order:
            for p, h in zip(self._layers[i].params, self._layers[i].host):
                p.data = h.to(self.device)
        self._order, self._streamed_ids, self.arena = [], set(), None


def _tensors(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, tuple | list):
        return [t for o in output for t in _tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _tensors(o)]
    return []


def _disabled(fn, i: int):
    def hook(*args):
        return fn(i, *args)

    return torch.compiler.disable(hook)


def apply_param_offload(
    model: nn.Module,
    fraction: float,
    *,
    layers_prefix: str | None = None,
    device: torch.device | str | None = None,
    slots: int = 2,
    allocator: str = "arena",
    keep_grads: bool = False,
) -> ParamOffloadHandle:
    """Stream ``fraction`` of the layers' parameter bytes from (pinned) host memory.

    ``device`` defaults to the device of the model's first parameter; a model built on the CPU
    with ``device="cuda"`` never needs to fit the GPU (only resident parameters are moved).
    ``allocator="torch"`` allocates each load from the caching allocator instead of the arena
    (the comparison baseline for reserved-memory measurements). Trained streamed parameters need
    a :class:`memopt.params.CPUAdamW` built with ``param_offload=handle``; ``keep_grads=True``
    instead leaves their gradients in ``.grad`` on the device (inspection and tests only: a
    device optimizer would update a shared slot, not the parameter).
    """
    layers = find_layers(model, layers_prefix)
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    sizes, need = [], []
    for _, mod in layers:
        params = list(mod.parameters())
        sizes.append(sum(p.numel() * p.element_size() for p in params))
        need.append(layer_layout(params)[1])
    plan = plan_layer_offload(sizes, fraction, slots=slots, layer_slot_bytes=need)
    return ParamOffloadHandle(model, layers, plan, dev, allocator=allocator, keep_grads=keep_grads)
