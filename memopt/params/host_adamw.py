"""``HostAdamW``: AdamW for FSDP2-sharded models whose shards live partly on the host.

Per parameter, by where its local shard lives::

    host (CPUOffloadPolicy group):  grad (host, from FSDP2) --update kernel--> fp32 master, m, v
                                    --same loop--> bf16 shard (what the next all-gather copies)
    device:                         torch's fused AdamW on the device (one foreach call)

With ``overlap=True`` a host shard's update is queued as soon as FSDP2 has copied its reduced
gradient to the host (a post-accumulate-grad hook on the sharded parameter, which FSDP2 calls
after the reduce-scatter) and runs on a worker thread, newest first (``update_queue``), so the
CPU step runs during the rest of the backward. ``step()`` steps the device shards and returns;
built with the ``offload`` record, each FSDP2 group's next forward waits for its own updates only
(otherwise ``step()`` waits for all). Global-norm clipping needs every gradient first, so it
refuses with ``overlap=True``.

State is torch.optim.AdamW's (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter, DTensors like
the parameter) plus ``master_param`` (fp32) for 16-bit host shards: ``state_dict`` /
``load_state_dict`` and ``torch.distributed.checkpoint`` work unchanged; the moments of host
shards stay fp32 when loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import torch

from memopt._torch_compat import fused_adamw_
from memopt.params._fsdp_compat import group_params, is_fsdp, local
from memopt.params.adamw_kernel import (
    CHUNK,
    AdamWStep,
    check_adamw_args,
    pick_update,
    torch_update,
)
from memopt.params.clip import clip_grads_
from memopt.params.update_queue import UpdateQueue

_FP32_KEYS = ("exp_avg", "exp_avg_sq", "master_param")


class HostAdamW(torch.optim.Optimizer):
    """AdamW over host and device shards (see the module docstring).

    Beyond torch.optim.AdamW's arguments: ``offload`` (the record from
    :func:`memopt.params.shard_with_offload`; supplies fp32 masters of bf16 host shards),
    ``overlap`` and ``accumulation_steps`` (update host shards during the backward of every
    ``accumulation_steps``-th micro-batch), ``kernel`` (``"torch"`` or ``"compiled"``: see
    :mod:`memopt.params.adamw_kernel`).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        maximize: bool = False,
        offload=None,
        overlap: bool = False,
        accumulation_steps: int = 1,
        kernel: str = "torch",
    ) -> None:
        check_adamw_args(lr, betas, eps, weight_decay, accumulation_steps)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)
        self.overlap, self.accumulation_steps = overlap, accumulation_steps
        self.threads = torch.get_num_threads()
        self.overlapped_updates = 0  # host updates started during backward (a counter)
        self._update = pick_update(kernel)
        self._scratch = torch.empty(0)  # fp32 gradient pieces (one user at a time)
        self._group_of: dict[int, dict] = {}
        self._micro: dict[int, int] = {}
        self._done: set[int] = set()
        self._hooks = []
        self._queue = UpdateQueue()
        for group in self.param_groups:
            for p in group["params"]:
                self._group_of[id(p)] = group
                self._init_state(p, offload)
                if overlap and self._on_host(p) and p.requires_grad:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))
        self.pipelined = bool(overlap and offload is not None and self._wait_in_forward(offload))
        if offload is not None:
            offload.attach_optimizer(self)
        self._warm_up()

    def _wait_in_forward(self, offload) -> bool:
        """A pre-forward hook per FSDP2 group, run before FSDP2's own (which copies the shards
        in): the group's forward waits for its own host updates only."""
        waits = []
        for _, mod in offload.groups:
            keys = [id(p) for p in group_params(mod)] if is_fsdp(mod) else []
            keys = [k for k in keys if k in self._group_of]
            if keys:
                hook = partial(_wait_hook, self._queue, keys)
                waits.append(mod.register_forward_pre_hook(hook, prepend=True))
        if waits:  # the model's state dict (and so DCP) reads updated weights
            root = offload.groups[-1][1]
            waits.append(root.register_state_dict_pre_hook(partial(_wait_all, self._queue)))
        self._hooks += waits
        return bool(waits)

    # ---- state ------------------------------------------------------------------------------
    @staticmethod
    def _on_host(p: torch.Tensor) -> bool:
        return local(p).device.type == "cpu"

    def _init_state(self, p: torch.Tensor, offload) -> None:
        host = self._on_host(p)
        dtype = torch.float32 if host else p.dtype
        st = self.state[p]
        st["step"] = torch.tensor(0.0)
        st["exp_avg"] = torch.zeros_like(p, dtype=dtype)
        st["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype)
        if host and p.dtype != torch.float32:
            master = offload.take_master(p) if offload is not None else None
            st["master_param"] = torch.zeros_like(p, dtype=torch.float32)
            local(st["master_param"]).copy_(master if master is not None else local(p))

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's loading casts state to the parameter's dtype; the moments and master of a
        host shard stay fp32 (a missing master, as in torch.optim.AdamW's state, is taken
        from the parameter)."""
        self.wait()
        saved = state_dict["state"]
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        super().load_state_dict(state_dict)
        for i, p in zip(ids, (p for g in self.param_groups for p in g["params"])):
            if not self._on_host(p) or i not in saved:
                continue
            st = self.state[p]
            for key in _FP32_KEYS:
                if key in saved[i]:
                    st[key] = saved[i][key].to(dtype=torch.float32, copy=True)
            if p.dtype != torch.float32 and "master_param" not in st:
                st["master_param"] = torch.zeros_like(p, dtype=torch.float32)
                local(st["master_param"]).copy_(local(p))

    def _warm_up(self) -> None:
        """Compile the kernel variants this model needs here, not on the worker thread."""
        if self._update is torch_update:
            return
        seen = set()
        for p in self.state:
            if not self._on_host(p):
                continue
            master = "master_param" in self.state[p]
            key = (p.dtype, master)
            if key in seen:
                continue
            seen.add(key)
            w = torch.zeros(16)
            out = torch.zeros(16, dtype=p.dtype) if master else None
            self._update(w, torch.zeros(16, dtype=p.dtype), w.clone(), w.clone(), out, _STEP0)

    # ---- updates ----------------------------------------------------------------------------
    def _push_host(self, p: torch.Tensor, group: dict) -> None:
        """Queue ``p``'s update with the gradient and scalars of now (the worker may run it
        after ``zero_grad`` or a scheduler step)."""
        st = self.state[p]
        st["step"] += 1
        s, g = _scalars(group, int(st["step"])), local(p.grad)
        self._queue.push(id(p), partial(self._update_host, p, g, s))

    def _update_host(self, p: torch.Tensor, g: torch.Tensor, s: AdamWStep) -> None:
        st = self.state[p]
        master = st.get("master_param")
        w = local(master) if master is not None else local(p).detach()
        out = local(p).detach() if master is not None else None
        m, v = local(st["exp_avg"]), local(st["exp_avg_sq"])
        if g.dtype != w.dtype and self._scratch.numel() < min(g.numel(), CHUNK):
            self._scratch = torch.empty(min(g.numel(), CHUNK), dtype=w.dtype)
        self._update(w, g, m, v, out, s, self._scratch)

    @staticmethod
    def _update_device(params: list[torch.Tensor], group: dict, state) -> None:
        if not params:
            return
        b1, b2 = group["betas"]
        steps = []
        for p in params:
            st = state[p]
            if st["step"].device != local(p).device:
                st["step"] = st["step"].to(local(p).device, torch.float32)
            steps.append(st["step"])
        torch._foreach_add_(steps, 1)
        fused_adamw_(
            [local(p).detach() for p in params],
            [local(p.grad) for p in params],
            [local(state[p]["exp_avg"]) for p in params],
            [local(state[p]["exp_avg_sq"]) for p in params],
            steps,
            lr=float(group["lr"]),
            beta1=float(b1),
            beta2=float(b2),
            weight_decay=float(group["weight_decay"]),
            eps=float(group["eps"]),
            maximize=bool(group["maximize"]),
        )

    def _on_grad(self, p: torch.Tensor) -> None:
        n = self._micro[id(p)] = self._micro.get(id(p), 0) + 1
        if n < self.accumulation_steps:
            return
        self._micro[id(p)] = 0
        self._done.add(id(p))
        self.overlapped_updates += 1
        self._push_host(p, self._group_of[id(p)])

    def wait(self) -> None:
        """Block until every queued host update has run (before reading the weights outside
        a forward, e.g. a state dict; ``state_dict`` and the other methods do it)."""
        self._queue.wait()

    _drain = wait

    @torch.no_grad()
    def step(self, closure=None):
        """Update every shard with a gradient. Host updates begun in backward may still run
        when this returns if the next forward waits per group (``pipelined``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            device = []
            for p in group["params"]:
                if p.grad is None or id(p) in self._done:
                    continue
                if self._on_host(p):
                    self._push_host(p, group)
                else:
                    device.append(p)
            self._update_device(device, group, self.state)
        self._done.clear()
        if not self.pipelined:
            self._queue.wait()
        return loss

    def state_dict(self) -> dict:
        self.wait()
        return super().state_dict()

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            self.wait()  # queued updates read the gradient tensors that this would zero
        self._micro.clear()
        super().zero_grad(set_to_none=set_to_none)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Global-norm clipping over host and device shards (equal to clip_grad_norm_)."""
        if self.overlap:
            raise RuntimeError(
                "clip_grad_norm_ cannot work with overlap=True: host shards are updated during "
                "backward, before the global norm is known. Build HostAdamW(overlap=False)."
            )
        self._drain()
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        return clip_grads_(grads, max_norm, norm_type)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._queue.close()

    # ---- report -----------------------------------------------------------------------------
    def placement_rows(self) -> list[dict]:
        """Per parameter group: masters and moments, host and device bytes apart."""
        rows = []
        for gi, group in enumerate(self.param_groups):
            acc: dict[tuple[str, str], list[int]] = {}
            for p in group["params"]:
                for key in _FP32_KEYS:
                    t = self.state[p].get(key)
                    if t is None:
                        continue
                    t = local(t)
                    where = "cpu" if t.device.type == "cpu" else "gpu"
                    name = "fp32 master" if key == "master_param" else "exp_avg+exp_avg_sq"
                    row = acc.setdefault((name, where), [0, 1])
                    row[0] += t.numel() * t.element_size()
                    row[1] &= int(t.is_pinned() or where != "cpu")
            for (name, where), (nbytes, pinned) in acc.items():
                rows.append(
                    {
                        "name": f"optimizer group {gi}: {name}",
                        "kind": "optimizer",
                        "param_bytes": nbytes,
                        "where": where,
                        "pinned": bool(pinned) and where == "cpu",
                        "slot": None,
                    }
                )
        return rows


_STEP0 = AdamWStep(lr=0.0, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, step=1)


def _scalars(group: dict, step: int) -> AdamWStep:
    b1, b2 = group["betas"]
    return AdamWStep(
        lr=float(group["lr"]),
        beta1=float(b1),
        beta2=float(b2),
        eps=float(group["eps"]),
        weight_decay=float(group["weight_decay"]),
        step=step,
        maximize=bool(group["maximize"]),
    )


def _wait_hook(queue: UpdateQueue, keys: list[int], module, args) -> None:
    queue.wait(keys)


def _wait_all(queue: UpdateQueue, *args, **kwargs) -> None:
    queue.wait()
