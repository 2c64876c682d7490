"""Optimizer states away from the device while the forward builds up: :class:`StateSwap`.

A training step peaks early in its backward, when every layer's saved activations are still
held (docs/steps.md: the FSDP2 step of docs/benchmarks.md peaks at the head's backward). The
optimizer's states (AdamW's two moments, as large as the parameters) sit in device memory
there, though nothing reads them until ``step()``. ``StateSwap`` moves them to pinned host
memory during the forward, frees their device memory, and brings them back from points of the
backward after the peak, so ``step()`` finds them in place::

    the earliest reload point's  side stream waits for the compute stream; each chosen state
    forward (pre hook)           is copied into its pinned host copy; its device storage is
                                 freed (record_stream: the allocator reuses it only after the
                                 copy)
    the rest of the forward,     the activations take the room the states left
    then the backward
    each reload point's          its group's storages are allocated again on the compute
    backward                     stream (so they return to the compute stream's pool when
                                 freed), then filled from the host on the side stream
    step() begins (pre hook)     the compute stream waits for the copies (a reload not started
                                 by then is started here, and its copies are not hidden)

Why the forward and not ``step()``'s end: a loop that reads ``loss.item()`` after ``step()``
(to log it) copies the loss to the host on the same copy engine; queued behind a gigabyte of
states it waits about 18 ms (H100, 54 GB/s; docs/benchmarks.md, sixty-ninth session). Once the
forward runs, nothing waits for the host until the next loss. Without reload points the copies
leave at ``step()``'s end and come back at the next ``step()``'s start, unhidden.

A reload point is a module whose forward comes before the step's peak and whose backward
begins after it (``reload_at``): a hook on its outputs' gradients (``register_multi_grad_hook``,
as FSDP2's pre-backward) starts the copies back. With a list of modules (in the order their
backward begins) the states are cut into as many consecutive groups of about equal bytes, and
each point starts its group: a copy engine busy with one long copy back holds every small
host-to-device copy queued behind it, FSDP2's pre-backward copies included, and the compute
stream waits for those (docs/steps.md: the same holds for the activation offload's copies
back). The states leave once per ``step()``: under gradient accumulation the first
micro-batch's forward sends them and its backward brings them back. Which states go: every
dense device state of at least ``min_bytes``, in parameter order, until ``max_bytes`` (all by
default). ``state_dict()`` and ``load_state_dict()`` bring them back first (hooks on the
optimizer); reading ``optimizer.state`` directly between the forward and the reload point reads
empty storages.

Each group's states share one device storage once they first came back (re-homed there, at
offsets aligned to ``ALIGN`` bytes) and one pinned host buffer, so a group moves in one copy
each way and frees or allocates with one call: 71 states a step each way cost about 2.6 ms of
host time as one copy each (H100, docs/benchmarks.md, seventieth session), on a step the host
already bounds. The first send copies state by state (nothing is allocated beside the states
then); the first reload allocates the group's storage and points its states into it.

With a memopt budget on the model holding the reload points, memopt's step plan waits until
the swap has sized itself and run a step (``memopt.step_waits``), and ``"auto"`` keeps that
size (docs/params.md).

The copies share the transfer stream of the activation offload (``memopt.offload.ops``): an
offload planned in the same forward queues behind the states' copies. On a CPU device they run
synchronously (tests). States of DTensor parameters (FSDP2) move their local shard.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import torch

from memopt import _torch_compat as compat
from memopt.errors import ConfigError
from memopt.offload import ops

log = logging.getLogger("memopt")

CALIBRATION_STEPS = 2
"""``max_bytes="auto"``: steps with states timed before any moves (the shorter windows count)."""

PRICE_STEPS = 2
"""A coupled ``"auto"`` swap: steps moving its states timed after sizing; the shortest, less
the shortest of the steps before (no moves), is its price (``memopt.step_swap``)."""

ALIGN = 512
"""Bytes each state's offset in its group's storage is a multiple of (the caching allocator's
rounding: vectorized optimizer kernels see the alignment a state of its own would have)."""

__all__ = ["StateSwap", "StateSwapStats"]


@dataclass
class StateSwapStats:
    away_bytes: int = 0
    """Bytes of states moved to the host after the last ``step()``."""
    tensors: int = 0
    """State tensors moved after the last ``step()``."""
    reloads: int = 0
    """Steps whose copies back were started by a reload point (hidden behind the backward)."""
    late: int = 0
    """Steps whose ``step()`` had to start some copies back itself (a reload point not
    reached: those copies are not hidden)."""
    auto: dict | None = None
    """``max_bytes="auto"``: the calibration step's windows (ms) and the rates that sized it."""
    price_ms: float | None = None
    """A coupled ``"auto"`` swap: the step time it costs, measured (``memopt.step_swap``)."""
    declined: str | None = None
    """Why memopt's step plan declined the swap (nothing moves since), if it did."""


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard itself (``to_local`` under grad mode returns a view of it, which
    ``set_`` would re-point alone), else ``t``."""
    to_local = getattr(t, "to_local", None)
    if not callable(to_local):
        return t
    with torch.no_grad():
        return to_local()


@dataclass
class _Group:
    """States that move together: each ``(state, offset)`` at its byte offset in ``storage``
    (None until the first reload re-homes them) and in the pinned ``host`` buffer."""

    items: list[tuple[torch.Tensor, int]]
    nbytes: int
    host: torch.Tensor
    storage: torch.Tensor | None = None


def _at(flat: torch.Tensor, like: torch.Tensor, offset: int) -> torch.Tensor:
    """A tensor shaped and strided as ``like`` at byte ``offset`` of the uint8 ``flat``."""
    out = torch.empty(0, dtype=like.dtype, device=flat.device)
    return out.set_(flat.untyped_storage(), offset // like.element_size(), like.shape,
                    like.stride())  # fmt: skip


class StateSwap:
    """See the module docstring. ``optimizer``: a ``torch.optim.Optimizer`` whose states live
    on the device; ``reload_at``: the module, or modules in backward order, whose backward
    starts the copies back (None: ``step()`` starts them, unhidden); ``model``: instead of
    ``reload_at``, every layer of this model (``memopt.api.model_layers``: the numbering of
    ``offload_layers``; ``layers=`` names the container) in backward order; ``max_bytes``: at
    most this many bytes go (None: all; ``"auto"``: what the copies move while they are
    hidden, :func:`auto_bytes`); ``min_bytes``: smaller states stay."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        reload_at: torch.nn.Module | list[torch.nn.Module] | None = None,
        max_bytes: int | str | None = None,
        min_bytes: int = 1 << 20,
        *,
        model: torch.nn.Module | None = None,
        layers: str | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(
                f"StateSwap: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if type(optimizer).__name__ == "HostAdamW":
            raise ConfigError(
                "StateSwap: HostAdamW keeps its moments on the host already; nothing to swap"
            )
        points = [reload_at] if isinstance(reload_at, torch.nn.Module) else reload_at
        points = [] if points is None else points
        if model is not None:
            points = _layer_points(model, layers, reload_at)
        if not isinstance(points, (list, tuple)) or not all(
            isinstance(m, torch.nn.Module) for m in points
        ):
            raise ConfigError(
                f"StateSwap: reload_at must be an nn.Module or a list of them (the modules whose "
                f"backward brings the states back), got {type(reload_at).__name__}"
            )
        self._auto = max_bytes == "auto"
        if self._auto and not points:
            raise ConfigError(
                "StateSwap: max_bytes='auto' sizes the copies to the forward and "
                "backward they hide behind: it needs reload_at= or model="
            )
        for name, v in (("max_bytes", None if self._auto else max_bytes), ("min_bytes", min_bytes)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ConfigError(f"StateSwap: {name} must be a non-negative int, got {v!r}")
        self.optimizer = optimizer
        self.max_bytes = None if self._auto else max_bytes
        self._marks: dict[str, object] = {}  # "auto": this step's events (send, reload, step)
        self._timing: list[tuple] = []  # "auto": earlier steps' events, not read yet
        self._windows: tuple[float, float] | None = None  # "auto": shortest windows seen (s)
        self._timed = 0  # "auto": steps timed
        self.min_bytes = min_bytes
        self.stats = StateSwapStats()
        self._away: list[_Group] = []  # this step's groups away, one per reload point
        self._issued = 0  # groups whose copies back have started this step
        self._events: list = []  # CUDA events: each issued group's copies finished
        self._cached: tuple[int, list[_Group]] | None = None  # (states known, groups)
        self._rechoose = False  # "auto" changed the limit: the next send chooses again
        self._points = max(len(points), 1)
        self._model = model if model is not None else (list(points) or None)  # a memopt
        # budget on it (or on the model holding a reload point) couples the two at step one
        self._coupled = False  # memopt plans the model under a budget: "auto" sizes once
        self._sends = 0  # steps ended whose forward sent the states at their final size
        self._sent = False  # ... this step's did
        self.moved_last = False  # the step ended last moved states (memopt.step_swap reads it)
        self._bare_s: float | None = None  # "auto": the shortest timed step moving nothing
        self._moving: list[float] = []  # ... and the steps moving states, timed to price it
        self._declined = False
        self._due = False  # step() ended: the first reload point's forward sends the states
        self._hooks = [
            optimizer.register_step_pre_hook(lambda *_: self.resident(for_step=True)),
            optimizer.register_step_post_hook(lambda *_: self._step_ended(bool(points))),
            optimizer.register_state_dict_pre_hook(lambda *_: self.resident()),
            optimizer.register_load_state_dict_pre_hook(lambda *_: self._forget()),
        ]
        for i, m in enumerate(points):
            self._hooks.append(m.register_forward_pre_hook(self._on_forward_pre))
            self._hooks.append(m.register_forward_hook(functools.partial(self._on_forward, i)))

    # ------------------------------------------------------------------ the two moves

    def _chosen(self) -> list[_Group]:
        """The states that go, in parameter order, cut into one group per reload point."""
        out, sizes, total = [], [], 0
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                state = self.optimizer.state.get(p, {})
                for key in sorted(state, key=str):  # exp_avg, exp_avg_sq, step: a fixed order
                    t = state[key]
                    if not isinstance(t, torch.Tensor):
                        continue
                    local = _local(t)
                    n = local.numel() * local.element_size()
                    if n < max(self.min_bytes, 1) or not ops.is_dense(local):
                        continue
                    if local.untyped_storage().nbytes() != n or local.storage_offset() != 0:
                        continue  # a view into a larger storage: freeing it would free others
                    if self.max_bytes is not None and total + n > self.max_bytes:
                        return self._grouped(out, sizes)
                    out.append(local)
                    sizes.append(n)
                    total += n
        return self._grouped(out, sizes)

    def _grouped(self, states: list[torch.Tensor], sizes: list[int]) -> list[_Group]:
        groups = []
        for part in _split(states, sizes, self._points):
            items, end = [], 0
            for state in part:
                items.append((state, end))
                n = state.numel() * state.element_size()
                end += (n + ALIGN - 1) // ALIGN * ALIGN
            host = torch.empty(end, dtype=torch.uint8, pin_memory=part[0].is_cuda)
            groups.append(_Group(items, end, host))
        return groups

    def _unhome(self) -> None:
        """Before the states are chosen again (a parameter got its first state, or ``"auto"``
        changed the limit): each state of a group's storage gets a storage of its own again,
        a group at a time (one group's bytes allocated beside the states at most)."""
        for g in self._cached[1] if self._cached is not None else ():
            if g.storage is None:
                continue
            for s, _ in g.items:
                own = torch.empty_strided(s.shape, s.stride(), dtype=s.dtype, device=s.device)
                own.copy_(s)
                s.set_(own.untyped_storage(), 0, s.shape, s.stride())
            g.storage = None
        self._cached = None

    def ready(self) -> bool:
        """Whether the swap moves what it keeps moving: a whole step, to its ``step()``, ran
        with the states sent at their final size (``"auto"``: once sized), or the swap was
        closed. (A reload point's forward may come before or after memopt reads a step's
        start: a send counts once its step has ended.)"""
        if not self.open():
            return True
        return self._sends > 0 and not self._pricing()

    def open(self) -> bool:
        """Whether the swap still moves states (not closed, not declined)."""
        return bool(self._hooks) and not self._declined

    def _pricing(self) -> bool:
        """A coupled ``"auto"`` swap timed on CUDA times its first steps with moves too."""
        return self._coupled and self._windows is not None and len(self._moving) < PRICE_STEPS

    def price_s(self) -> float | None:
        """The step time the swap costs: its shortest timed step with moves less the shortest
        without (None until both are timed)."""
        if self._bare_s is None or len(self._moving) < PRICE_STEPS:
            return None
        return max(0.0, min(self._moving) - self._bare_s)

    def decline(self, why: str) -> None:
        """memopt's step plan is better without the swap: from the next step nothing moves
        (the states get their own storages back as the next forward begins)."""
        self._declined, self.stats.declined = True, why
        self.max_bytes, self._rechoose = 0, True
        log.info("StateSwap: %s", why)

    def _step_ended(self, later: bool) -> None:
        if self._model is not None:  # the first step: a memopt budget on the model waits
            self._coupled = _couple(self, self._model)
            self._model = None
        self._sends += self._sent
        self.moved_last, self._sent = self._sent and self.stats.away_bytes > 0, False
        if later:
            self._due = True
        else:
            self._send_away()

    def _send_away(self) -> None:
        n = len(self.optimizer.state)  # the same state tensors every step, unless a parameter
        if self._rechoose or self._cached is None or self._cached[0] != n:  # a parameter got
            self._unhome()  # its first state (or load_state_dict), or "auto" sized the limit
            self._cached, self._rechoose = (n, self._chosen()), False
        groups = self._cached[1]
        states = [s for g in groups for s, _ in g.items]
        self.stats.away_bytes = sum(s.numel() * s.element_size() for s in states)
        self.stats.tensors = len(states)
        self._sent = True
        if not groups:
            return
        device = states[0].device
        cuda = device.type == "cuda"
        if cuda:
            side = ops.transfer_stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
        for g in groups:
            if g.storage is not None:  # re-homed: one copy, one free
                pairs = [(g.host, g.storage)]
            else:  # state by state, the first time (nothing allocated beside them)
                pairs = [(_at(g.host, s, off), s) for s, off in g.items]
            if cuda:
                with torch.cuda.stream(side):
                    compat.copy_many([h for h, _ in pairs], [d for _, d in pairs])
                for _, d in pairs:
                    d.record_stream(side)
            else:
                for h, d in pairs:
                    h.copy_(d)
            for _, d in pairs:
                d.untyped_storage().resize_(0)
        self._away, self._issued, self._events = groups, 0, []

    def reload(self, upto: int | None = None) -> None:
        """Start the copies back of the groups before ``upto`` (all by default) not started
        yet this step; each group's storage is allocated on the compute stream (whose pool
        gets it back when it leaves again) and filled on the transfer stream. A group's first
        reload allocates its storage and points its states into it (``set_``)."""
        end = len(self._away) if upto is None else min(upto, len(self._away))
        while self._issued < end:
            g = self._away[self._issued]
            self._issued += 1
            device = g.items[0][0].device
            if g.storage is None:
                g.storage = torch.empty(g.nbytes, dtype=torch.uint8, device=device)
                for s, off in g.items:
                    s.set_(g.storage.untyped_storage(), off // s.element_size(), s.shape,
                           s.stride())  # fmt: skip
            else:
                g.storage.untyped_storage().resize_(g.nbytes)
            if device.type != "cuda":
                g.storage.copy_(g.host)
                continue
            side = ops.transfer_stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                g.storage.copy_(g.host, non_blocking=True)
                self._events.append(side.record_event())

    def resident(self, for_step: bool = False) -> None:
        """Make every state usable on the device: start what no reload point started, and
        make the current stream wait for the copies. ``for_step``: ``step()`` is about to read
        them (a step that had to start some copies itself is counted ``late``)."""
        if for_step and self._due:
            _warn_unreached()
        if self._away:
            if self._issued < len(self._away):
                self.stats.late += for_step
                self.reload()
            if self._events:
                stream = torch.cuda.current_stream(self._away[0].items[0][0].device)
                for e in self._events:
                    stream.wait_event(e)
            self._away, self._issued, self._events = [], 0, []
        if for_step and "send" in self._marks:  # timed to after the waits: a late copy counts
            self._calibrate()

    def _forget(self) -> None:
        self.resident()
        self._cached = None  # load_state_dict makes new state tensors

    @torch.compiler.disable  # a forward hook runs eagerly: docs/params.md
    def _on_forward_pre(self, module, args) -> None:
        if self._due and torch.is_grad_enabled():
            self._due = False
            timing = not self._coupled or self._timed < CALIBRATION_STEPS or self._pricing()
            if self._auto and timing and not self._declined:
                self._marks = {}
                self._mark("send")
                if self._timed < CALIBRATION_STEPS:  # nothing goes: the windows are timed
                    return
            self._send_away()

    # ------------------------------------------------------------------ max_bytes="auto"

    def _device(self) -> torch.device | None:
        for state in self.optimizer.state.values():
            for t in state.values():
                if isinstance(t, torch.Tensor) and _local(t).device.type != "cpu":
                    return _local(t).device
        return None

    def _mark(self, name: str) -> None:
        dev = self._device()
        if dev is None or dev.type != "cuda":
            self._marks[name] = None
            return
        self._marks[name] = event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(dev))

    def _calibrate(self) -> None:
        """``step()`` begins: the windows of this step (and of earlier steps whose events are
        done) are read; the limit is what the copies move in the shortest windows seen, so
        a step slowed by compilation (or by memopt planning the step again) never sizes it.
        The first ``CALIBRATION_STEPS`` steps with states move nothing and are waited for;
        later ones are read once their events are done (no wait)."""
        from memopt.params.rates import host_rates

        self._mark("step")
        marks, self._marks = self._marks, {}
        events = tuple(marks.get(k) for k in ("send", "reload", "step"))
        if events[0] is None or events[2] is None:  # no CUDA copy engine to size for
            if self._timed < CALIBRATION_STEPS:
                log.info("StateSwap max_bytes='auto': every state (no CUDA copy engine)")
            self._timed = CALIBRATION_STEPS
            return
        if events[1] is None:  # the backward reached no reload point
            if self._timed < CALIBRATION_STEPS:
                self._timed, self.max_bytes = CALIBRATION_STEPS, 0
                log.warning("StateSwap max_bytes='auto': no reload point was reached in the "
                            "backward; nothing moves")  # fmt: skip
            return
        self._timing.append((*events, self._sent))  # sent at its size (none: priced too)
        wait = self._timed < CALIBRATION_STEPS or self._pricing()  # memopt reads it next step
        self._timed += 1
        pending = []
        for send, back, end, moved in self._timing:
            if wait:
                end.synchronize()
            elif not end.query():
                pending.append((send, back, end, moved))
                continue
            fwd_s, bwd_s = send.elapsed_time(back) / 1e3, back.elapsed_time(end) / 1e3
            old = self._windows or (fwd_s, bwd_s)
            self._windows = (min(old[0], fwd_s), min(old[1], bwd_s))
            if moved and len(self._moving) < PRICE_STEPS:
                self._moving.append(fwd_s + bwd_s)
            else:
                self._bare_s = min(self._bare_s or math.inf, fwd_s + bwd_s)
        self._timing = pending
        if self._windows is None or self._timed < CALIBRATION_STEPS:
            return
        if self._coupled and self.max_bytes is not None:  # sized once: the step plan's size
            self.stats.price_ms = None if self.price_s() is None else 1e3 * self.price_s()
            return
        rates = host_rates(self._device())
        size = auto_bytes(*self._windows, rates.d2h_Bps, rates.h2d_Bps)
        if size != self.max_bytes:
            self.max_bytes, self._rechoose = size, True  # chosen again under the limit
            self.stats.auto = dict(forward_ms=1e3 * self._windows[0],
                                   backward_ms=1e3 * self._windows[1],
                                   d2h_Bps=rates.d2h_Bps, h2d_Bps=rates.h2d_Bps)  # fmt: skip
            log.info("StateSwap max_bytes='auto': %.1f ms from the send point to the first "
                     "reload point at %.1f GB/s, %.1f ms from there to step() at %.1f GB/s "
                     "(the shortest of %d steps): %d B", 1e3 * self._windows[0],
                     rates.d2h_Bps / 1e9, 1e3 * self._windows[1], rates.h2d_Bps / 1e9,
                     self._timed, size)  # fmt: skip

    @torch.compiler.disable  # a forward hook runs eagerly: docs/params.md
    def _on_forward(self, point: int, module, args, output) -> None:
        if not torch.is_grad_enabled():
            return
        leaves = torch.utils._pytree.tree_leaves(output)  # as memopt.region_registry reads them
        tensors = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
        if tensors:
            hook = functools.partial(self._reached, point)
            torch.autograd.graph.register_multi_grad_hook(tensors, hook, mode="any")

    def _reached(self, point: int, *_) -> None:
        if "send" in self._marks and "reload" not in self._marks:
            self._mark("reload")
        if self._issued <= point < len(self._away):
            self.stats.reloads += self._issued == 0
            self.reload(point + 1)

    def close(self) -> None:
        """Bring the states back and remove every hook."""
        self.resident()
        self._due, self.moved_last = False, False
        st = self.stats
        log.info(
            "StateSwap: %d B in %d tensors away a step; %d reloads hidden, %d late",
            st.away_bytes,
            st.tensors,
            st.reloads,
            st.late,
        )
        for h in self._hooks:
            h.remove()
        self._hooks = []


def _couple(swap: StateSwap, model: torch.nn.Module | list[torch.nn.Module]) -> bool:
    """The model (``model=``), or the one memopt optimized that holds a reload point, is
    planned by memopt under a budget: its step plan waits for the swap
    (``memopt.step_waits``), and the swap keeps its first size. Whether it is."""
    from memopt.api import _STATES

    state = _STATES.get(model) if isinstance(model, torch.nn.Module) else None
    if state is None and isinstance(model, list):  # reload_at=: the optimized model holding one
        ids = {id(m) for m in model}
        found = (st for m, st in list(_STATES.items()) if any(id(x) in ids for x in m.modules()))
        state = next(found, None)
    if state is None or state.config.budget is None:
        return False
    state.waits.add(swap.ready, "StateSwap")
    if swap._auto:  # timed with and without moves: the step plan may decline it
        state.swaps.add(swap)
    log.info("StateSwap: the model is planned under a budget: its step plan waits until the "
             "swap has sized itself and sent the states once; the size then stays")  # fmt: skip
    return True


def _warn_unreached() -> None:
    import warnings

    warnings.warn(
        "StateSwap: step() came without the forward reaching a reload point since the last "
        "step(), so no state left the device. If the model (or another instance of its class) "
        "was compiled before StateSwap registered its hooks, torch.compile does not see them "
        "(torch._dynamo.config.skip_nnmodule_hook_guards): create StateSwap before the first "
        "compiled call, or call torch._dynamo.reset()",
        stacklevel=4,
    )


def auto_bytes(forward_s: float, backward_s: float, d2h_Bps: float, h2d_Bps: float,
               share: float = 0.9) -> int:  # fmt: skip
    """``max_bytes="auto"``: the bytes whose copy away fits between the send point and the
    first reload point (``forward_s``: they must be gone by the step's peak) and whose copy
    back fits between that point and ``step()`` (``backward_s``), each at ``share`` of the
    host's measured pinned rate (``memopt.params.rates``), so the copies stay hidden."""
    limit = share * min(d2h_Bps * forward_s, h2d_Bps * backward_s)
    return max(int(min(limit, 1 << 62)), 0)


def _layer_points(model, layers, reload_at) -> list[torch.nn.Module]:
    from memopt.api import model_layers

    if reload_at is not None:
        raise ConfigError("StateSwap: give reload_at= or model=, not both")
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"StateSwap: model must be an nn.Module, got {type(model).__name__}")
    found = model_layers(model, layers)
    if not found:
        raise ConfigError(
            f"StateSwap: {type(model).__name__} has no container of repeated layers (a "
            "ModuleList or Sequential of one class) to reload from; pass reload_at="
        )
    return found[::-1]


def _split(chosen: list, sizes: list[int], parts: int) -> list[list]:
    """``chosen`` in order, cut into at most ``parts`` consecutive groups of about equal
    bytes (``sizes``; a group ends once the running total reaches its share)."""
    total, groups, run = sum(sizes), [[]], 0
    for item, n in zip(chosen, sizes, strict=True):
        groups[-1].append(item)
        run += n
        if run * parts >= total * len(groups) and len(groups) < parts:
            groups.append([])
    return [g for g in groups if g]
