"""Exact gradients for 16-bit host shards: fp32 accumulation over micro-batches.

A bf16 host shard's gradient arrives from FSDP2 in bf16. For one backward that is exact (an
fp32 shard gets ``float(g)`` of the same bf16 ``g`` at world size 1), but FSDP2 would add the
next micro-batch's gradient into it in bf16 (it accumulates into a sharded gradient that is not
None, after a blocking copy into fresh pageable memory). An fp32 shard gets
``float(g1) + float(g2)`` in fp32. :class:`Fp32Grads` keeps that
fp32 value in a persistent buffer beside the bf16 ``.grad`` of every tracked (16-bit host)
parameter::

    forward with grad enabled (pre-hook per FSDP2 group):   arm: remember .grad (g) and its
                                                            exact value so far
    the group's backward starts (hook on its outputs):      .grad still g -> .grad = None, so
        FSDP2 copies the next gradient fresh (pinned, non-blocking); .grad changed or cleared
        since the forward (``model.zero_grad()``) -> the record is void
    the gradient lands (HostAdamW's FSDP2 group notice):    queue on the update worker:
        acc = exact so far + float(.grad) in fp32;  .grad = bf16(acc)  (what readers see)
    the backward ends (autograd's final callback):          wait for those tasks
    clip (HostAdamW.clip_grad_norm_):   the norm of ``acc`` (checked as below); the factor
           goes into the update, which sees fl(acc * coef) as an fp32 shard's would
    step:  the update reads ``acc`` where ``.grad`` still equals its bf16 rounding (checked on
           the data: an op through a DTensor, as torch's foreach clipping, bumps no version
           counter); elements changed outside (e.g. torch.nn.utils.clip_grad_norm_, in bf16)
           are taken as changed, with a warning

With one backward per step nothing is recorded and nothing runs (clipped or not). The buffers
(4 B per tracked parameter, pageable, counted in ``HostAdamW.host_stats``) are allocated on first
use and kept, so later steps touch no fresh pages. The adds run on the update worker's threads
while the backward goes on (16 B/element per micro-batch). Not detected:
``model.zero_grad(set_to_none=False)`` between a forward and its backward.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial

import torch
from torch.utils._pytree import tree_flatten

from memopt._torch_compat import queue_backward_callback
from memopt.params import _fsdp_compat as fc
from memopt.params._fsdp_compat import group_params, is_fsdp, local
from memopt.params.adamw_native import acc_pass


@dataclass
class _Rec:
    """What is known of one parameter's gradient ``grad`` (the ``.grad`` object it is about).

    ``exact``: ``acc`` holds its exact value (``.grad`` shows ``acc``'s bf16 rounding unless
    changed outside). ``armed``: a forward ran, hand ``grad`` over when the backward starts.
    ``handed``: ``.grad`` was set to None; the next landing is added to ``grad``'s value.
    """

    grad: torch.Tensor
    exact: bool = False
    armed: bool = False
    handed: bool = False


class Fp32Grads:
    """fp32 accumulation and clipping for the 16-bit host shards ``params`` (see the module
    docstring); ``groups``: the FSDP2 modules whose forward starts a micro-batch; ``queue``:
    the update worker's :class:`~memopt.params.update_queue.UpdateQueue`; ``fsdp``: ``id(sharded
    param) -> FSDPParam`` (``_fsdp_compat.fsdp_params_by_id``, the optimizer's); ``native``: the C
    passes of :func:`~memopt.params.adamw_native.acc_pass` on ``threads`` threads (else torch's
    ops, the same numbers)."""

    def __init__(
        self, params, groups, queue, fsdp: dict, *, native: bool = False, threads: int = 1
    ) -> None:
        self.native, self.threads = native, threads
        self._params: dict[int, torch.Tensor] = {}
        self._rec: dict[int, _Rec] = {}
        self._buf: dict[int, torch.Tensor] = {}  # persistent fp32 buffers
        self._queue = queue
        self._fsdp = fsdp
        self._folds: set[int] = set()  # fold tasks queued in this backward
        self._warned = False
        self._hooks = []
        self.add(params, groups)

    def add(self, params, groups) -> None:
        """Track ``params`` too (e.g. shards the automatic placement moved to the host)."""
        new = {id(p): p for p in params if id(p) not in self._params}
        self._params.update(new)
        for mod in groups:
            mine = [p for p in (group_params(mod) if is_fsdp(mod) else []) if id(p) in new]
            if mine:
                self._hooks.append(mod.register_forward_pre_hook(partial(self._arm, mine)))
                self._hooks.append(mod.register_forward_hook(partial(self._watch, mine)))

    def __contains__(self, p) -> bool:
        return id(p) in self._params

    @property
    def nbytes(self) -> int:
        """Host bytes of the fp32 buffers."""
        return sum(t.numel() * t.element_size() for t in self._buf.values())

    def _acc(self, p) -> torch.Tensor:
        buf = self._buf.get(id(p))
        if buf is None:
            buf = self._buf[id(p)] = torch.empty_like(local(p), dtype=torch.float32)
        return buf

    # ---- forward: arm; the group's backward starts: hand over ------------------------------
    @torch.compiler.disable  # a forward hook runs eagerly: docs/params.md
    def _arm(self, params, module, args) -> None:
        if not torch.is_grad_enabled():
            return
        for p in params:
            rec = self._rec.get(id(p))
            if rec is not None and (rec.armed or rec.handed):
                continue  # a checkpoint's recompute inside this micro-batch's backward
            if p.grad is None:
                self._rec.pop(id(p), None)
                continue
            if rec is None or rec.grad is not p.grad:
                rec = self._rec[id(p)] = _Rec(p.grad)
            rec.armed = True

    @torch.compiler.disable  # a forward hook runs eagerly: docs/params.md
    def _watch(self, params, module, args, output) -> None:
        if not any(getattr(self._rec.get(id(p)), "armed", False) for p in params):
            return
        leaves = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)]
        leaves = [t for t in leaves if t.requires_grad]
        hook = partial(self._hand_over, params)
        for t in leaves:
            t.register_hook(hook)
        if not leaves:  # no backward through this call: its gradients stay as they are
            for p in params:
                if id(p) in self._rec:
                    self._rec[id(p)].armed = False

    def _hand_over(self, params, grad) -> None:
        for p in params:
            rec = self._rec.get(id(p))
            if rec is None or not rec.armed:
                continue
            rec.armed = False
            if p.grad is not rec.grad:  # cleared or replaced after the forward: void
                self._rec.pop(id(p))
                continue
            p.grad = None
            rec.handed = True

    # ---- the gradient lands: fold it in on the worker ---------------------------------------
    def landed(self, p) -> None:
        """FSDP2 assigned ``p``'s gradient (HostAdamW's group notice, after its own handler took
        the fold for an update due now): queue the fold unless taken."""
        fold = self.take_fold(p)
        if fold is None:
            return
        if not self._folds:
            queue_backward_callback(self._end_of_backward)
        self._folds.add(id(p))
        self._queue.push(id(p), fold)

    def _end_of_backward(self) -> None:
        self.settle()

    def settle(self) -> None:
        """Wait for the folds queued since the last wait (the worker runs newest first: an
        update queued after a fold must not overtake it)."""
        keys, self._folds = self._folds, set()
        if keys:
            self._queue.wait(keys)

    def take_fold(self, p):
        """At ``p``'s landing: the task that adds the new gradient into the exact value so far
        and returns it (None when nothing was handed over). The caller runs it, on the worker."""
        rec = self._rec.get(id(p))
        if rec is None or not rec.handed:
            return None
        rec.handed = False
        before, new = rec.grad, p.grad
        if new is None:
            self._rec.pop(id(p))
            return None
        fp = self._fsdp.get(id(p))
        event = fc.grad_copy_event(fp) if fp is not None else None
        self._rec[id(p)] = _Rec(new, exact=True)
        return partial(self._fold, p, before, rec.exact, new, event)

    def _fold(self, p, before, before_exact: bool, new, event) -> torch.Tensor:
        if event is not None:
            event.synchronize()
        acc, old, fresh = self._acc(p), local(before), local(new)
        if self.native:  # one pass, 14 B/element (10 the first time)
            mode = 2 if before_exact else 1
            self._changed(acc_pass(acc, old, mode, fresh, fresh, self.threads))
            return acc
        if before_exact:
            self._checked(acc, old)
        else:
            acc.copy_(old)
        acc.add_(fresh)
        fresh.copy_(acc)
        return acc

    def _checked(self, acc: torch.Tensor, vis: torch.Tensor) -> torch.Tensor:
        """``acc`` where ``vis`` (the bf16 ``.grad``) still shows it; elements changed outside
        are taken from ``vis`` (once, a warning)."""
        if self.native:
            self._changed(acc_pass(acc, vis, 2, threads=self.threads))
            return acc
        same = vis == acc.to(vis.dtype)
        if not bool(same.all()):
            acc.copy_(torch.where(same, acc, vis.float()))
            self._changed(1)
        return acc

    def _changed(self, count: int) -> None:
        if count and not self._warned:
            self._warned = True
            warnings.warn(
                "memopt HostAdamW: gradients of bf16 host shards were changed outside "
                "HostAdamW (e.g. by torch.nn.utils.clip_grad_norm_), in bf16: the changed "
                "values are used as changed, rounded to bf16. Clip with opt.clip_grad_norm_ "
                "to keep them fp32",
                stacklevel=2,
            )

    # ---- the step and clipping ---------------------------------------------------------------
    def value(self, p):
        """``p``'s gradient for the update: ``.grad``'s local tensor, or for an accumulated or
        clipped one a task that returns the exact fp32 value (checked against ``.grad``; the
        caller runs it on the worker). None without a gradient."""
        rec = self._rec.get(id(p))
        if p.grad is None or rec is None or rec.grad is not p.grad or not rec.exact:
            if rec is not None and rec.grad is not p.grad:
                self._rec.pop(id(p))
            return local(p.grad) if p.grad is not None else None
        return partial(self._checked, self._acc(p), local(p.grad))

    def clear(self) -> None:
        self._rec.clear()

    def close(self) -> None:
        self.clear()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
