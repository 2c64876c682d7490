"""``HostAdamW``: AdamW for FSDP2-sharded models whose shards live partly on the host.

Per parameter, by where its local shard lives::

    host (CPUOffloadPolicy group):  grad (host, from FSDP2) --update kernel--> fp32 master, m, v
                                    --same loop--> bf16 shard (what the next all-gather copies)
    device:                         torch's fused AdamW on the device (one foreach call)

With ``overlap=True`` a host shard's update is queued as soon as FSDP2 has copied its reduced
gradient to the host (a notice at the end of the group's ``post_backward``,
``_fsdp_compat.on_reduced``: a post-accumulate-grad hook would make torch >= 2.13 copy it
synchronously into pageable memory) and runs on a worker thread, newest first (``update_queue``), so the
CPU step runs during the rest of the backward. ``step()`` steps the device shards and returns;
built with the ``offload`` record, each FSDP2 group's next forward waits for its own updates only
(otherwise ``step()`` waits for all). Global-norm clipping needs every gradient first, so it
refuses with ``overlap=True``.

bf16 host shards (``host_dtype="auto"``) get fp32 gradient buffers: micro-batches are added in
fp32 (:mod:`memopt.params.grad_acc`), as for fp32 shards. ``clip_grad_norm_`` applies its factor
inside the next update of host shards (their ``.grad`` is not rewritten).

State is torch.optim.AdamW's (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter, DTensors like
the parameter) plus ``master_param`` (fp32) for 16-bit host shards: ``state_dict`` /
``load_state_dict`` and ``torch.distributed.checkpoint`` work unchanged; the moments of host
shards stay fp32 when loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

import torch

from memopt._torch_compat import fused_adamw_
from memopt.errors import ConfigError
from memopt.params import _fsdp_compat as fc
from memopt.params._fsdp_compat import group_params, is_fsdp, local
from memopt.params.adamw_kernel import (
    CHUNK,
    AdamWStep,
    check_adamw_args,
    device_update,
    pick_kernel,
    step_scalars,
    torch_update,
)
from memopt.params.adamw_native import group_update, native_ok, sumsq_ok
from memopt.params.clip import clip_coef, total_norm
from memopt.params.device_overlap import device_overlap_for
from memopt.params.fsdp import MASTER_FLAG
from memopt.params.grad_acc import Fp32Grads
from memopt.params.host_nvme import MomentFile
from memopt.params.report import optimizer_rows
from memopt.params.threads import (
    check_nice,
    name_thread,
    resolve_threads,
    set_thread_nice,
    set_thread_team,
)
from memopt.params.update_queue import UpdateQueue

_FP32_KEYS = ("exp_avg", "exp_avg_sq", "master_param")


class HostAdamW(torch.optim.Optimizer):
    """AdamW over host and device shards (see the module docstring).

    Beyond torch.optim.AdamW's arguments: ``offload`` (the record from
    :func:`memopt.params.shard_with_offload`; supplies fp32 masters of bf16 host shards),
    ``overlap`` and ``accumulation_steps`` (update host shards during the backward of every
    ``accumulation_steps``-th micro-batch), ``kernel`` (``"auto"``: the C loop of
    :mod:`memopt.params.adamw_native` where a C compiler builds it, else ``"torch"``, torch's
    fused kernel; ``"native"`` insists on the loop), ``threads`` (the update worker's CPU threads:
    ``"auto"`` (default) for this process's share of the host's cores less one, None for
    torch's count, or an int; see :mod:`memopt.params.threads`), ``batch`` (``"group"``: one
    task and one fused call per FSDP2 group once its gradients are on the host; ``"param"``),
    ``nice`` (Linux: the update worker and its CPU team run at this lower priority, 0..19, so
    the threads that launch GPU work are not kept waiting for a core; 0: the default),
    ``device_overlap`` (with ``overlap``: device shards too are updated during backward and
    their gradients freed, :mod:`memopt.params.device_overlap`; ``model``: the FSDP2-sharded
    model whose groups it watches when no ``offload`` record names them).
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
        kernel: str = "auto",
        threads: int | str | None = "auto",
        batch: str = "group",
        nvme_dir: str | None = None,
        nice: int = 0,
        device_overlap: bool = False,
        model: torch.nn.Module | None = None,
    ) -> None:
        check_adamw_args(lr, betas, eps, weight_decay, accumulation_steps)
        self._nice = check_nice(nice)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)
        if batch not in ("group", "param"):
            raise ValueError(f"batch={batch!r} must be 'group' or 'param'")
        self.overlap, self.accumulation_steps, self.batch = overlap, accumulation_steps, batch
        team = resolve_threads(threads)
        self.threads = team if team is not None else torch.get_num_threads()
        self.overlapped_updates = 0  # host updates started during backward (a counter)
        self.kernel = pick_kernel(kernel)  # what runs: "native" or "torch"
        self._scratch = torch.empty(0)  # fp32 gradient pieces (one user at a time)
        self._group_of: dict[int, dict] = {}
        self._micro: dict[int, int] = {}
        self._done: set[int] = set()
        self._hooks = []
        self._hooked: set[int] = set()
        self.worker_threads: int | None = None  # set by the worker when it starts
        self._queue = UpdateQueue(init=partial(self._start_worker, team))
        mods = [m for _, m in offload.groups] if offload is not None else []
        self._fsdp = fc.fsdp_params_by_id(mods)
        self._gkey = {pid: gi for gi, m in enumerate(mods) for pid in _ids(m)}
        self._pending: dict[int, list[_Item]] = {}
        self._clip: tuple[float, dict] | None = None  # clip_grad_norm_'s factor, its gradients
        self._hooks += [fc.on_reduced(m, self._on_reduced) for m in mods if _ids(m)]
        for group in self.param_groups:
            for p in group["params"]:
                self._group_of[id(p)] = group
                self._init_state(p, offload, moments=nvme_dir is None or not self._on_host(p))
                self._hook_host(p)
        host = [id(p) for p in self.state if self._on_host(p) and p.requires_grad]
        self._expect = _count_by_key(self._gkey, host)
        self._nvme = None
        if nvme_dir is not None:  # host shards' moments in a file (memopt.params.host_nvme)
            sizes = [(id(p), local(p).numel()) for p in self.state if self._on_host(p)]
            self._nvme = MomentFile(nvme_dir, sizes)
        # 16-bit host shards: gradients accumulated and clipped in fp32 (memopt.params.grad_acc)
        self._fp32 = Fp32Grads(
            self._sixteen(self.state),
            mods,
            self._queue,
            self._fsdp,
            native=self.kernel == "native",
            threads=self.threads,
        )
        self.pipelined = bool(overlap and offload is not None and self._wait_in_forward(offload))
        self._offload = offload
        self._device = device_overlap_for(self, device_overlap, mods, model)
        if offload is not None:
            offload.attach_optimizer(self)

    def _hook_host(self, p: torch.Tensor) -> None:
        """With ``overlap``, a host shard's update is queued when its gradient lands: an FSDP2
        group's by the group's notice (:meth:`_on_reduced`), another's by its own hook."""
        if self.overlap and self._on_host(p) and p.requires_grad and id(p) not in self._hooked:
            self._hooked.add(id(p))
            if id(p) not in self._fsdp:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))

    def _on_reduced(self, params) -> None:
        """An FSDP2 group's gradients landed: queue the updates due (``overlap``), then fold
        the other micro-batches' gradients of 16-bit host shards into their fp32 buffers."""
        for p in params:
            if id(p) in self._hooked:
                self._on_grad(p)
            if p in self._fp32:
                self._fp32.landed(p)

    def _sixteen(self, params) -> list[torch.Tensor]:
        return [
            p
            for p in params
            if self._on_host(p) and p.requires_grad and "master_param" in self.state[p]
        ]

    def _grad(self, p):
        """``p``'s gradient (local), or for a 16-bit host shard's accumulated or clipped one a
        task the worker runs that returns its exact fp32 value (:mod:`memopt.params.grad_acc`)."""
        if p in self._fp32:
            return self._fp32.value(p)
        return local(p.grad) if p.grad is not None else None

    def _start_worker(self, team: int | None) -> None:
        name_thread("memopt-adamw")  # before the team exists: its threads inherit the name
        set_thread_nice(self._nice)  # and the priority
        self.worker_threads = set_thread_team(team)

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

    def _init_state(self, p: torch.Tensor, offload, moments: bool = True) -> None:
        host = self._on_host(p)
        dtype = torch.float32 if host else p.dtype
        st = self.state[p]
        st["step"] = torch.tensor(0.0)
        if moments:  # else they live in the NVMe file, zero at the start
            st["exp_avg"] = torch.zeros_like(p, dtype=dtype)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype)
        if host and p.dtype != torch.float32:
            master = offload.take_master(p) if offload is not None else None
            if master is None and getattr(p, MASTER_FLAG, False):
                raise ConfigError(
                    "memopt HostAdamW: a bf16 host shard's fp32 master is in the record of "
                    "shard_with_offload / memopt.optimize(param_offload=...): pass it as "
                    "HostAdamW(..., offload=rec) (memopt.param_offload_handle(model))"
                )
            st["master_param"] = torch.zeros_like(p, dtype=torch.float32)
            local(st["master_param"]).copy_(master if master is not None else local(p))

    @property
    def nvme_tier(self) -> bool:
        return self._nvme is not None

    def adopt_host(self, params: Iterable[torch.Tensor]) -> None:
        """Parameters whose shards FSDP2 now keeps on the host (the automatic placement moved
        their group): their step count and moments move to the host as fp32, their updates to
        the CPU (during backward with ``overlap``)."""
        if self._nvme is not None:
            raise RuntimeError("HostAdamW(nvme_dir=...) cannot take more host shards")
        self.wait()
        for p in params:
            if p not in self.state or not self._on_host(p):
                continue
            st = self.state[p]
            st["step"] = st["step"].detach().to("cpu", torch.float32)
            for key in ("exp_avg", "exp_avg_sq"):
                moved = torch.zeros_like(p, dtype=torch.float32)
                local(moved).copy_(local(st[key]))
                st[key] = moved
            if p.dtype != torch.float32 and "master_param" not in st:
                st["master_param"] = torch.zeros_like(p, dtype=torch.float32)
                local(st["master_param"]).copy_(local(p))
            self._hook_host(p)
        host = [id(p) for p in self.state if self._on_host(p) and p.requires_grad]
        self._expect = _count_by_key(self._gkey, host)
        mods = [m for _, m in self._offload.groups] if self._offload is not None else []
        self._fp32.add(self._sixteen(params), mods)

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
            if self._nvme is not None and id(p) in self._nvme:
                m, v = st.pop("exp_avg"), st.pop("exp_avg_sq")
                self._nvme.write(id(p), local(m), local(v)).result()

    # ---- updates ----------------------------------------------------------------------------
    def _item(self, p: torch.Tensor, group: dict, grad: torch.Tensor) -> _Item:
        """``p``'s update with the gradient and scalars of now (the worker may run it after
        ``zero_grad`` or a scheduler step), and the event its gradient's D2H copy ends with."""
        st = self.state[p]
        st["step"] += 1
        fp = self._fsdp.get(id(p))
        ev = fc.grad_copy_event(fp) if fp is not None else None
        if fp is None and p.grad is not None and _cuda_in_use():
            ev = _SYNC_ALL  # an unknown copy: wait for the whole device (correct, not fast)
        scale = 1.0  # clip_grad_norm_'s factor, while p's gradient is the one it measured
        if self._clip is not None and self._clip[1].get(id(p)) is p.grad is not None:
            scale = self._clip[0]
        return _Item(p, grad, step_scalars(group, int(st["step"]), scale), ev)

    def _push(self, items: list[_Item]) -> None:
        self._queue.push([id(it.p) for it in items], partial(self._run_items, items))

    def _add(self, item: _Item) -> None:
        """Queue ``item`` now, or with the rest of its FSDP2 group (``batch="group"``)."""
        gi = self._gkey.get(id(item.p))
        if self.batch != "group" or gi is None:
            self._push([item])
            return
        pending = self._pending.setdefault(gi, [])
        pending.append(item)
        if len(pending) >= self._expect.get(gi, 0):
            self._push(self._pending.pop(gi))

    def _flush(self) -> None:
        for gi in list(self._pending):
            self._push(self._pending.pop(gi))

    def _run_items(self, items: list[_Item]) -> None:
        """On the worker: wait for the gradients' copies, then one fused call per set of
        scalars for plain fp32 shards, and the update kernel for the others."""
        for ev in {id(it.event): it.event for it in items if it.event is not None}.values():
            if ev is _SYNC_ALL:
                torch.cuda.synchronize()
            else:
                ev.synchronize()
        items = [_Item(it.p, it.grad(), it.s, None) if callable(it.grad) else it for it in items]
        if self._nvme is not None:
            self._nvme.run(
                [id(it.p) for it in items],
                lambda i, m, v: self._update_host(items[i].p, items[i].grad, items[i].s, m, v),
            )
            return
        native, fused, rest = [], {}, []
        for it in items:
            w, out = self._targets(it.p)
            st = self.state[it.p]
            mv = (local(st["exp_avg"]), local(st["exp_avg_sq"]))
            if self.kernel == "native" and native_ok(w, it.grad, out, *mv):
                native.append(it)
            elif out is None and it.grad.dtype == w.dtype:
                fused.setdefault(_hyper(it.s), []).append(it)
            else:
                rest.append(it)
        if native:
            self._native_host(native)
        for group in fused.values():
            self._fused_host(group)
        for it in rest:
            self._update_host(it.p, it.grad, it.s)

    def _targets(self, p) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the update writes: the fp32 master (or the shard itself) and, for a 16-bit
        shard with a master, the shard as the write-back."""
        master = self.state[p].get("master_param")
        if master is None:
            return local(p).detach(), None
        return local(master), local(p).detach()

    def _native_host(self, items: list[_Item], moments=None) -> None:
        """One call of the C loop over the items (``moments``: the NVMe tier's buffers)."""
        ws, outs, ms, vs = [], [], [], []
        for i, it in enumerate(items):
            w, out = self._targets(it.p)
            if moments is None:
                st = self.state[it.p]
                m, v = local(st["exp_avg"]), local(st["exp_avg_sq"])
            else:
                m, v = moments[i]
            ws.append(w), outs.append(out), ms.append(m.view(w.shape)), vs.append(v.view(w.shape))
        grads = [it.grad for it in items]
        group_update(ws, grads, ms, vs, outs, [it.s.tensor() for it in items], self.threads)

    def _fused_host(self, items: list[_Item]) -> None:
        s = items[0].s
        st = [self.state[it.p] for it in items]
        grads = [it.grad for it in items]
        if s.grad_scale != 1.0:  # clipping's factor: fl(g * coef), as torch's clip would
            grads = torch._foreach_mul(grads, torch.tensor(s.grad_scale, dtype=torch.float32))
        fused_adamw_(
            [local(it.p).detach() for it in items],
            grads,
            [local(x["exp_avg"]) for x in st],
            [local(x["exp_avg_sq"]) for x in st],
            [torch.tensor(float(it.s.step)) for it in items],
            lr=s.lr,
            beta1=s.beta1,
            beta2=s.beta2,
            weight_decay=s.weight_decay,
            eps=s.eps,
            maximize=s.maximize,
        )

    def _update_host(self, p, g, s: AdamWStep, m=None, v=None) -> None:
        """One host shard (``m``, ``v``: flat moment buffers from the NVMe tier; the state's
        own tensors otherwise): the C loop where it applies, else torch's kernel."""
        w, out = self._targets(p)
        st = self.state[p]
        if m is None:
            m, v = local(st["exp_avg"]), local(st["exp_avg_sq"])
        else:
            m, v = m.view(w.shape), v.view(w.shape)
        if self.kernel == "native" and native_ok(w, g, out, m, v):
            self._native_host([_Item(p, g, s, None)], [(m, v)])
            return
        if g.dtype != w.dtype and self._scratch.numel() < min(g.numel(), CHUNK):
            self._scratch = torch.empty(min(g.numel(), CHUNK), dtype=w.dtype)
        torch_update(w, g, m, v, out, s, self._scratch)

    def _landed(self, p: torch.Tensor) -> bool:
        """Count a landing of ``p``'s gradient: True at every ``accumulation_steps``-th."""
        n = self._micro.get(id(p), 0) + 1
        self._micro[id(p)] = n % self.accumulation_steps
        return n >= self.accumulation_steps

    def _on_grad(self, p: torch.Tensor) -> None:
        if not self._landed(p):
            return  # a 16-bit host shard's gradient is folded into fp32 next (_on_reduced)
        self._done.add(id(p))
        self.overlapped_updates += 1
        fold = self._fp32.take_fold(p) if p in self._fp32 else None  # folded with the update
        grad = fold if fold is not None else self._grad(p)
        self._add(self._item(p, self._group_of[id(p)], grad))

    def wait(self) -> None:
        """Block until every queued host update has run (before reading the weights outside
        a forward, e.g. a state dict; ``state_dict`` and the other methods do it); the device
        updates made during backward (``device_overlap``) come before what runs next."""
        self._device.finish()
        self._queue.wait()

    _drain = wait

    def wait_for(self, params: Iterable[torch.Tensor]) -> None:
        """Block until the queued host updates of ``params`` have run (before their shards are
        read, e.g. staged on the device ahead of their group's forward)."""
        self._queue.wait([id(p) for p in params if id(p) in self._group_of])

    @torch.no_grad()
    def step(self, closure=None):
        """Update every shard with a gradient. Host updates begun in backward may still run
        when this returns if the next forward waits per group (``pipelined``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._device.finish(new_step=True)  # updates made during backward come first
        self._flush()  # groups whose parameters did not all get a gradient
        self._fp32.settle()
        for group in self.param_groups:
            device = []
            for p in group["params"]:
                g = self._grad(p) if id(p) not in self._done else None
                if g is None:
                    continue
                if self._on_host(p):
                    self._add(self._item(p, group, g))
                else:
                    device.append(p)
            device_update(device, group, self.state)
        self._flush()
        self._done.clear()
        self._clip = None
        if not self.pipelined:
            self._queue.wait()
        auto = getattr(self._offload, "auto", None)
        if auto is not None:  # param_offload="auto" / bytes: time the step, choose once
            auto.on_step(self, self._offload)
        return loss

    def state_dict(self) -> dict:
        self.wait()
        packed = super().state_dict()
        if self._nvme is not None:  # the moments of host shards, read back from the file
            params = [p for g in self.param_groups for p in g["params"]]
            for i, p in enumerate(params):
                if id(p) in self._nvme and i in packed["state"]:
                    m, v = (torch.zeros_like(p, dtype=torch.float32) for _ in range(2))
                    for f in self._nvme.read(id(p), local(m), local(v)):
                        f.result()
                    packed["state"][i] = {**packed["state"][i], "exp_avg": m, "exp_avg_sq": v}
        return packed

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            self.wait()  # queued updates read the gradient tensors that this would zero
        self._micro.clear()
        self._fp32.clear()
        self._device.clear()
        self._clip = None
        super().zero_grad(set_to_none=set_to_none)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Global-norm clipping over host and device shards: returns the norm, and the next
        :meth:`step` updates with the gradients times ``min(1, max_norm / (norm + 1e-6))``, the
        numbers of ``torch.nn.utils.clip_grad_norm_``. Device gradients are scaled in place;
        host shards' ``.grad`` are *not* rewritten: the factor is applied inside their update
        (bitwise as if scaled first), which saves two passes over host memory. The host norm
        is one C pass (2-norm, ``kernel="native"``). A new backward or ``zero_grad`` before
        ``step`` drops the factor."""
        if self.overlap:
            raise RuntimeError(
                "clip_grad_norm_ cannot work with overlap=True: host shards are updated during "
                "backward, before the global norm is known. Build HostAdamW(overlap=False)."
            )
        self._drain()
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        host = [p for p in params if self._on_host(p)]
        device = [p.grad for p in params if not self._on_host(p)]
        vals = [self._grad(p) for p in host]
        vals = [v() if callable(v) else v for v in vals]  # accumulated: the checked fp32 sums
        scale = self._clip[0] if self._clip is not None else 1.0  # a second call: already scaled
        if scale != 1.0:
            vals = [v * torch.tensor(scale, dtype=torch.float32) for v in vals]
        native = self.kernel == "native" and all(sumsq_ok(v) for v in vals)
        mesh_from = [p.grad for p in params]
        norm = total_norm(device, norm_type, mesh_from, vals, self.threads if native else 0)
        coef = clip_coef(norm, max_norm)
        for g in device:
            local(g).mul_(coef.to(local(g).device))
        total = float((coef * torch.tensor(scale, dtype=torch.float32)).item())
        self._clip = (total, {id(p): p.grad for p in host})
        return norm

    def host_stats(self) -> dict:
        """Seconds the update worker was busy, tasks it finished, and seconds the training
        thread waited for it (forward pre-hooks, ``step``, ``wait``), since construction. With
        ``pipelined`` updates the last step's tasks may still run: call :meth:`wait` first
        for complete counts. Also this rank's host bytes (parameter shards, masters, moments)
        pinned and pageable, and with ``param_offload="auto"`` its inputs and choice."""
        out: dict = dict(self._queue.stats())
        rows = self.placement_rows()
        if self._offload is not None:
            rows += self._offload.placement_rows()
        cpu = [r for r in rows if r.get("where") == "cpu"]
        out["host_pinned_bytes"] = sum(r["param_bytes"] for r in cpu if r.get("pinned"))
        out["host_pageable_bytes"] = sum(r["param_bytes"] for r in cpu if not r.get("pinned"))
        out["host_fp32_grad_bytes"] = self._fp32.nbytes  # in the pageable bytes
        auto = getattr(self._offload, "auto", None)
        if auto is not None:
            out["auto"] = auto.to_dict()
        return out

    def close(self) -> None:
        self._device.close()
        self._fp32.close()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._queue.close()
        if self._nvme is not None:
            self._nvme.close()

    # ---- report -----------------------------------------------------------------------------
    def placement_rows(self) -> list[dict]:
        """Per parameter group: masters and moments, host and device bytes apart (and the fp32
        gradient buffers of 16-bit host shards)."""
        on_disk = self._nvme if self._nvme is not None else ()
        return optimizer_rows(self.param_groups, self.state, _FP32_KEYS, on_disk, self._fp32.nbytes)


@dataclass(frozen=True)
class _Item:
    """One host shard's queued update."""

    p: torch.Tensor
    grad: object  # a local tensor, or a task returning one (memopt.params.grad_acc)
    s: AdamWStep
    event: object  # the gradient copy's CUDA event, _SYNC_ALL, or None


_SYNC_ALL = object()


def _hyper(s: AdamWStep) -> tuple:
    return (s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.maximize, s.grad_scale)


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _ids(mod) -> list[int]:
    return [id(p) for p in group_params(mod)] if is_fsdp(mod) else []


def _count_by_key(key_of: dict[int, int], ids) -> dict[int, int]:
    out: dict[int, int] = {}
    for k in (key_of[i] for i in ids if i in key_of):
        out[k] = out.get(k, 0) + 1
    return out


@torch.compiler.disable  # a forward hook runs eagerly: docs/params.md
def _wait_hook(queue: UpdateQueue, keys: list[int], module, args) -> None:
    queue.wait(keys)


def _wait_all(queue: UpdateQueue, *args, **kwargs) -> None:
    queue.wait()
