"""``CPUAdamW``: AdamW whose fp32 master weights, ``exp_avg`` and ``exp_avg_sq`` live on the host.

Data flow per parameter ``p`` (it stays on the device; for parameters that live on the host use
FSDP2 offload and :class:`memopt.params.HostAdamW`)::

    backward: p.grad (device) --D2H, side stream--> pinned staging --worker--> fp32 grad flat
              p.grad = None                        (device gradient freed as soon as it is copied)
    step():   fused AdamW kernel over flat chunks  (vectorized; ``threads`` chunks at a time)
              master --cast--> p (H2D, side stream; compute waits before the next forward)

Gradients accumulate in the fp32 flat across backward calls until :meth:`zero_grad`, so gradient
accumulation works unchanged. With ``fused_backward=True`` a parameter is updated on the worker
as soon as its gradient of the last micro-batch (``accumulation_steps``) is complete, and its
gradient is consumed; global-norm clipping cannot work then (every other gradient is still to
come) and :meth:`clip_grad_norm_` refuses. With ``nvme_dir`` the moments live in a file and are
streamed through in chunks (read ``k + 1`` / update ``k`` / write ``k - 1``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from memopt._torch_compat import fused_adamw_, has_fused_adamw
from memopt.params.adamw_kernel import check_adamw_args
from memopt.params.flat import flat_offsets, make_chunks, merge_runs
from memopt.params.nvme import NvmeStore
from memopt.params.optim_state import load_state, pack_state


@dataclass
class _P:
    param: torch.nn.Parameter
    group: int
    offset: int
    numel: int
    staging: torch.Tensor | None = None  # pinned grad buffer for D2H
    wstage: torch.Tensor | None = None  # pinned cast buffer for H2D write-back
    step: int = 0
    has_grad: bool = False
    micro: int = 0
    pending: Future | None = None
    updated: bool = False  # fused: updated in backward, device write-back still due


class CPUAdamW(torch.optim.Optimizer):
    """AdamW with host-resident fp32 master weights and moments (ZeRO-Offload style).

    Args beyond torch.optim.AdamW's: ``fused_backward`` and ``accumulation_steps`` (update
    inside backward),
    ``chunk_numel`` (elements per kernel call / NVMe I/O), ``threads`` (chunks updated at once;
    each call is already multi-threaded by ATen, so 1 is usually best), ``nvme_dir``.
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
        fused_backward: bool = False,
        accumulation_steps: int = 1,
        chunk_numel: int = 1 << 22,
        threads: int = 1,
        nvme_dir: str | None = None,
    ) -> None:
        check_adamw_args(lr, betas, eps, weight_decay, accumulation_steps)
        if fused_backward and nvme_dir is not None:
            raise ValueError(
                "fused_backward=True with nvme_dir is not supported: the per-parameter "
                "update would read and write the moments one parameter at a time"
            )
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)
        self.fused_backward = fused_backward
        self.accumulation_steps = accumulation_steps
        self.nvme_dir = nvme_dir
        self._use_fused = has_fused_adamw("cpu")
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="memopt-adamw")
        self._threads = max(1, threads)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="memopt-grad")
        self._cuda = any(p.is_cuda for g in self.param_groups for p in g["params"])
        self._d2h = torch.cuda.Stream() if self._cuda else None
        self._h2d = torch.cuda.Stream() if self._cuda else None
        self._h2d_done = None
        self._infos: dict[int, _P] = {}
        self._flats: list[dict[str, torch.Tensor]] = []
        self._chunks = []
        self._stores: list[NvmeStore | None] = []
        self._hooks = []
        for gi, group in enumerate(self.param_groups):
            self._build_group(gi, group, chunk_numel)

    # ---- setup -------------------------------------------------------------------------------
    def _build_group(self, gi: int, group: dict, chunk_numel: int) -> None:
        params = group["params"]
        numels = [p.numel() for p in params]
        offsets, total = flat_offsets(numels)
        pin = self._cuda

        def flat() -> torch.Tensor:
            return torch.zeros(total, dtype=torch.float32, pin_memory=pin)

        f = {"master": flat(), "grad": flat()}
        store = None
        if self.nvme_dir is None:
            f["exp_avg"], f["exp_avg_sq"] = flat(), flat()
        else:
            store = NvmeStore(self.nvme_dir, 8 * total, name=f"adamw-group{gi}")
            zeros = torch.zeros(min(total, chunk_numel), dtype=torch.float32)
            futs = [
                store.write(o * 4, zeros[: min(chunk_numel, 2 * total - o)])
                for o in range(0, 2 * total, chunk_numel)
            ]
            for fu in futs:
                fu.result()
        for p, off, n in zip(params, offsets, numels):
            if id(p) in self._infos:
                raise ValueError("a parameter appears in more than one parameter group")
            if not p.is_contiguous():
                raise ValueError("CPUAdamW needs contiguous parameters")
            f["master"][off : off + n].copy_(p.detach().reshape(-1))
            info = _P(p, gi, off, n)
            if p.is_cuda:
                info.staging = torch.empty(n, dtype=p.dtype, pin_memory=True)
                if p.dtype != torch.float32:
                    info.wstage = torch.empty(n, dtype=p.dtype, pin_memory=True)
            self._infos[id(p)] = info
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))
        self._flats.append(f)
        self._chunks.append(make_chunks(offsets, numels, chunk_numel))
        self._stores.append(store)

    def owns(self, p: torch.Tensor) -> bool:
        return id(p) in self._infos

    def add_param_group(self, param_group: dict) -> None:
        if getattr(self, "_flats", None) is not None and self._infos:
            raise NotImplementedError("CPUAdamW: build it with every parameter group up front")
        super().add_param_group(param_group)

    # ---- gradients ---------------------------------------------------------------------------
    def _on_grad(self, p: torch.Tensor) -> None:
        info = self._infos[id(p)]
        g = p.grad
        if info.pending is not None:
            info.pending.result()
        if g.is_cuda:
            self._d2h.wait_stream(torch.cuda.current_stream(g.device))
            with torch.cuda.stream(self._d2h):
                info.staging.copy_(g.reshape(-1), non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self._d2h)
            g.record_stream(self._d2h)
            p.grad = None
            info.pending = self._worker.submit(self._accumulate, info, info.staging, ev)
        else:
            p.grad = None
            self._accumulate(info, g.reshape(-1), None)

    def _accumulate(self, info: _P, g: torch.Tensor, ev) -> None:
        if ev is not None:
            ev.synchronize()
        acc = self._flats[info.group]["grad"][info.offset : info.offset + info.numel]
        if info.has_grad:
            acc.add_(g)
        else:
            acc.copy_(g)
        info.has_grad = True
        info.micro += 1
        if self.fused_backward and info.micro >= self.accumulation_steps:
            self._update_param(info)

    def _update_param(self, info: _P) -> None:
        """The fused back pass: update one parameter, write it back, consume its gradient."""
        f, group = self._flats[info.group], self.param_groups[info.group]
        info.step += 1
        s, e = info.offset, info.offset + info.numel
        self._kernel(
            group,
            f["master"][s:e],
            f["grad"][s:e],
            f["exp_avg"][s:e],
            f["exp_avg_sq"][s:e],
            info.step,
        )
        if not info.param.is_cuda:
            self._write_back(info)  # host memory: safe from the worker thread
        else:
            info.updated = True  # the H2D copy waits for step(), ordered after the backward
        f["grad"][s:e].zero_()
        info.has_grad, info.micro = False, 0

    def _wait(self) -> None:
        for info in self._infos.values():
            if info.pending is not None:
                info.pending.result()
                info.pending = None

    # ---- the update --------------------------------------------------------------------------
    def _kernel(self, group: dict, w, g, m, v, step: int) -> None:
        lr = float(group["lr"])
        b1, b2 = (float(b) for b in group["betas"])
        wd, eps = float(group["weight_decay"]), float(group["eps"])
        if self._use_fused:
            st = torch.tensor(float(step))
            fused_adamw_(
                [w],
                [g],
                [m],
                [v],
                [st],
                lr=lr,
                beta1=b1,
                beta2=b2,
                weight_decay=wd,
                eps=eps,
                maximize=bool(group["maximize"]),
            )
            return
        if group["maximize"]:
            g = -g
        w.mul_(1.0 - lr * wd)
        m.lerp_(g, 1.0 - b1)
        v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
        denom = (v.sqrt() / math.sqrt(1.0 - b2**step)).add_(eps)
        w.addcdiv_(m, denom, value=-lr / (1.0 - b1**step))

    @torch.no_grad()
    def step(self, closure=None):
        """Apply the accumulated gradients (or, fused, finish the updates begun in backward)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._wait()
        if self._h2d_done is not None:
            self._h2d_done.synchronize()  # the pinned cast buffers are free again
        if self.fused_backward:
            touched = [i for i in self._infos.values() if i.updated]
        else:
            touched = [i for i in self._infos.values() if i.has_grad]
            for info in touched:
                info.step += 1
            for gi in range(len(self.param_groups)):
                self._step_group(gi)
        for info in touched:
            self._write_back(info)
            info.updated = False
        if self._cuda:
            self._h2d_done = torch.cuda.Event()
            self._h2d_done.record(self._h2d)
            torch.cuda.current_stream().wait_stream(self._h2d)
        return loss

    def _step_group(self, gi: int) -> None:
        f, group, store = self._flats[gi], self.param_groups[gi], self._stores[gi]
        infos = [self._infos[id(p)] for p in group["params"]]
        keep = [i.has_grad for i in infos]
        steps = [i.step for i in infos]

        def update(chunk, m, v) -> None:
            for s, e, st in merge_runs(chunk.segments, keep, steps):
                a, b = s - chunk.start, e - chunk.start
                self._kernel(group, f["master"][s:e], f["grad"][s:e], m[a:b], v[a:b], st)

        chunks = self._chunks[gi]
        if store is None:

            def one(c):
                return update(c, f["exp_avg"][c.start : c.end], f["exp_avg_sq"][c.start : c.end])

            if self._threads > 1:
                list(self._pool.map(one, chunks))
            else:
                for c in chunks:
                    one(c)
            return
        self._step_group_nvme(gi, chunks, update)

    def _step_group_nvme(self, gi: int, chunks, update) -> None:
        """read chunk k + 1 | update chunk k | write chunk k - 1, with two buffer pairs."""
        store, total = self._stores[gi], self._flats[gi]["master"].numel()
        n = max(c.end - c.start for c in chunks)
        bufs = [torch.empty(2, n, dtype=torch.float32) for _ in range(2)]
        writes: list[Future | None] = [None, None]

        def read(k: int) -> list[Future]:
            c, (m, v) = chunks[k], bufs[k % 2]
            ln = c.end - c.start
            after = writes[k % 2]
            return [
                store.read(c.start * 4, m[:ln], after),
                store.read((total + c.start) * 4, v[:ln], after),
            ]

        pending = read(0)
        for k, c in enumerate(chunks):
            for fu in pending:
                fu.result()
            if k + 1 < len(chunks):
                pending = read(k + 1)
            m, v = bufs[k % 2]
            ln = c.end - c.start
            update(c, m[:ln], v[:ln])
            w1 = store.write(c.start * 4, m[:ln])
            w2 = store.write((total + c.start) * 4, v[:ln])
            writes[k % 2] = w2  # one writer thread: w2 done implies w1 done
            del w1
        for w in writes:
            if w is not None:
                w.result()

    def _write_back(self, info: _P) -> None:
        s, e = info.offset, info.offset + info.numel
        master = self._flats[info.group]["master"][s:e]
        if info.param.is_cuda:
            src = master
            if info.wstage is not None:
                info.wstage.copy_(master)
                src = info.wstage
            self._h2d.wait_stream(torch.cuda.current_stream(info.param.device))
            with torch.cuda.stream(self._h2d):
                info.param.data.view(-1).copy_(src, non_blocking=True)
        else:
            info.param.data.view(-1).copy_(master)

    # ---- the rest of the optimizer protocol ---------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        self._wait()
        for info in self._infos.values():
            if info.has_grad:
                f = self._flats[info.group]["grad"]
                f[info.offset : info.offset + info.numel].zero_()
            info.has_grad, info.micro = False, 0
            info.param.grad = None

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clip the accumulated host gradients by their global norm; returns the norm."""
        if self.fused_backward:
            raise RuntimeError(
                "clip_grad_norm_ cannot work with fused_backward=True: each parameter is updated "
                "as soon as its gradient is complete, before the global norm is known. Use "
                "fused_backward=False to clip."
            )
        self._wait()
        grads = [f["grad"] for f in self._flats]
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
        )
        coef = float(max_norm) / (float(norm) + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)
        return norm

    def from_flats(self, gi: int, name: str) -> torch.Tensor:
        """A group's flat state ``name`` (master, grad, exp_avg, exp_avg_sq) as one fp32 tensor."""
        if name in self._flats[gi]:
            return self._flats[gi][name]
        store, total = self._stores[gi], self._flats[gi]["master"].numel()
        out = torch.empty(total, dtype=torch.float32)
        store.read(0 if name == "exp_avg" else total * 4, out).result()
        return out

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._wait()
        self._pool.shutdown()
        self._worker.shutdown()
        for s in self._stores:
            if s is not None:
                s.close()

    def state_dict(self) -> dict:
        """torch.optim.AdamW's format (``exp_avg``, ``exp_avg_sq``, ``step`` per parameter
        index) plus ``master_param``, the fp32 weights; loadable into either optimizer."""
        self._wait()
        packed = super().state_dict()
        packed["state"] = pack_state(self)
        return packed

    def load_state_dict(self, state_dict: dict) -> None:
        """Load this optimizer's or torch.optim.AdamW's state dict (then master = the param)."""
        self._wait()
        load_state(self, state_dict)
        if self._cuda:
            torch.cuda.current_stream().wait_stream(self._h2d)

    def placement_rows(self) -> list[dict]:
        """Report rows: per group, fp32 master + gradient (host) and the moments (host/disk)."""
        rows = []
        for gi, f in enumerate(self._flats):
            n = f["master"].numel() * 4
            rows.append(
                {
                    "name": f"optimizer group {gi}: fp32 master+grad",
                    "kind": "optimizer",
                    "param_bytes": 2 * n,
                    "where": "cpu",
                    "slot": None,
                }
            )
            rows.append(
                {
                    "name": f"optimizer group {gi}: exp_avg+exp_avg_sq",
                    "kind": "optimizer",
                    "param_bytes": 2 * n,
                    "where": "cpu" if self._stores[gi] is None else "disk",
                    "slot": None,
                }
            )
        return rows
