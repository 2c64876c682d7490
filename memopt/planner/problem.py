"""The planner's input, as plain data: candidates, the step timeline, offload windows.

Nothing here knows about FX. The lead's analysis fills these from the joint graph; tests build
them by hand.

Positions. The step is one line of *positions*: forward op ``k`` is position ``k`` and
backward op ``k`` is position ``F + k`` (``F`` forward ops, ``B`` backward ops). A tensor is
*live at* a position when it is allocated while that op runs.

Layer events. With ``n`` repeated layers the step has ``2n`` layer events, in time order:
event ``k < n`` is "forward of layer ``k`` begins", event ``k >= n`` is "backward of layer
``2n-1-k`` begins" (backward runs the layers in reverse). Offload windows are expressed as
events, which is what the per-layer sync dict encodes (see :mod:`memopt.planner.emit`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import sympy


@dataclass(frozen=True)
class OpCost:
    """One op of a graph: its kernel's measured time, else its roofline inputs."""

    flops: float = 0.0
    """Floating-point operations (a matmul of (m,k)x(k,n) is 2*m*k*n)."""
    bytes: int = 0
    """Bytes read plus bytes written by the op."""
    seconds: float | None = None
    """The kernel's time measured on the device (memopt.kernel_times: matmuls, attention,
    convolutions, reductions); None: the roofline prices the op."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One saved activation (a tensor the forward keeps for the backward)."""

    name: str
    """Unique name (the FX node name)."""
    cluster_id: str
    """ORT-style cluster id, e.g. ``"BiasGelu+"``; plan strings address clusters."""
    occurrence: int
    """0-based forward-order index within the cluster (what a plan's Count refers to)."""
    layer: int | None
    """Index of the repeated layer that produces it; None outside the layers (not offloadable)."""
    nbytes: int
    """Size in bytes (the concrete hint of ``nbytes_expr``)."""
    produce_pos: int
    """Forward op index of the producing op."""
    first_bwd_use_pos: int
    """Backward op index of its first backward user (views included): where a recompute is
    placed, so a recomputed tensor is live from here (not its first kernel's read)."""
    last_fwd_use_pos: int | None = None
    """Forward op index of its last forward use; None means ``produce_pos``. The tensor is live
    up to here whatever the decision."""
    last_bwd_use_pos: int | None = None
    """Backward op index of its last backward use; None means ``first_bwd_use_pos``."""
    recomputable: bool = False
    """Whether a recompute subgraph exists (its inputs stay saved whatever the plan)."""
    recompute_ops: tuple[OpCost, ...] = ()
    """The ops of the recompute subgraph (each costed by the roofline)."""
    recompute_temp_bytes: int = 0
    """Extra bytes the recompute subgraph holds briefly (intermediates), counted at the first
    backward use."""
    compromise_kept_bytes: int | None = None
    """Bytes kept instead (a smaller cast input) when strategy 2 applies; None: no compromise."""
    recompute_kept_bytes: int = 0
    """Bytes a recompute still saves (the RNG state of a seeded recompute): its saving is
    ``nbytes`` less these, as :func:`memopt.decide.decide` orders requested recomputes by."""
    compromise_ops: tuple[OpCost, ...] | None = None
    """Ops recomputed under the compromise; None means ``recompute_ops``."""
    offloadable: bool = False
    """Whether it may be copied to the host (needs ``layer``)."""
    nbytes_expr: sympy.Expr | None = None
    """Symbolic size, for reports only (the planner solves with ``nbytes``)."""
    recompute_reads: tuple[str, ...] = ()
    """Names of the other candidates whose tensors the recompute subgraph reads (the chain
    rule of :mod:`memopt.planner.chains` counts those that are recomputed too)."""
    compromise_reads: tuple[str, ...] = ()
    """The same for the compromise's subgraph."""
    fused_unless_saved: bool = False
    """Inductor fuses it into its forward readers when it is not saved (every reader is a
    pointwise kernel): recomputed or compromised, it takes no memory in the forward."""
    reused_when_recomputed: bool = False
    """Recomputed (or compromised), its last backward reader is an Inductor kernel that writes
    its output into the recomputed buffer (same dtype, bytes and layout; the graph owns it): it
    is gone at that reader, whose output takes its place."""
    reused_when_kept: bool = False
    """The same when kept: only a *donated* saved tensor (one whose storage is no forward input,
    user forward output or backward output) may be reused by the backward."""
    reuse_undone: tuple[tuple[int, int], ...] = ()
    """``(backward position, bytes)`` of the candidates above (reused) that its recompute or
    compromise subgraph reads: recomputed, it is one more reader of their buffers, and a
    buffer with a reader besides the last one's kernel is not reused (it stays live at that
    reader). Charged whatever their own strategy: an over-estimate when they are not reused."""
    fused_charges: tuple[tuple[int, int], ...] = ()
    """``(backward position, bytes)`` a recompute holds there because Inductor fuses it with
    the backward's same-size pointwise kernels that read its inputs (the SwiGLU product with
    the up and gate gradients): one kernel, at the first of them, making all their outputs at
    once (see ``passes.build_planning_problem._fused_group``). Charged when recomputed."""
    fused_at: tuple[str, ...] = ()
    """The backward kernel (node name) of each of ``fused_charges``: where the CLI's liveness
    sweep of the applied graph charges them too (:func:`memopt.cli.liveness.step_profile`)."""
    compromise_only: bool = False
    """Its subgraph rebuilds it only from a smaller cast input: strategy 1 does not apply to
    it (:func:`memopt.decide.decide` ignores a plan string asking for it), strategy 2 does."""
    rerun_with: tuple[str, ...] = ()
    """The other candidates its recompute remakes (``passes/rerun_siblings.py``): nodes of its
    subgraph, other outputs of a multi-output op it reruns (an attention kernel's log-sum-exp
    and Philox seed and offset beside its output), pointwise ops of its recomputed values.
    Recomputed, the partitioner saves none of them (:func:`memopt.planner.memory.rerun_intervals`)."""
    kept_by_chain: bool = False
    """The plan strings cannot recompute it: :func:`memopt.decide.decide` keeps it even when
    its cluster's plan covers it (a recompute chain would be too deep). Recompute and
    compromise then act as keep: no saving, no time."""

    @property
    def fwd_last(self) -> int:
        return self.produce_pos if self.last_fwd_use_pos is None else self.last_fwd_use_pos

    @property
    def bwd_last(self) -> int:
        return self.first_bwd_use_pos if self.last_bwd_use_pos is None else self.last_bwd_use_pos

    @property
    def has_compromise(self) -> bool:
        return self.recomputable and self.compromise_kept_bytes is not None


@dataclass(frozen=True, kw_only=True)
class StepTimeline:
    """Everything about the step that is not a candidate: op times and the other live bytes."""

    fwd_op_s: tuple[float, ...]
    """Seconds per forward op (e.g. :func:`memopt.planner.costs.roofline_s` of each node)."""
    bwd_op_s: tuple[float, ...]
    """Seconds per backward op."""
    fwd_live_bytes: tuple[int, ...]
    """Bytes live during each forward op, excluding every candidate (graph inputs, forward
    temporaries, outputs that are not saved activations)."""
    bwd_live_bytes: tuple[int, ...]
    """Bytes live during each backward op, excluding every candidate (gradients, temporaries,
    other saved tensors such as parameters)."""
    static_bytes: int = 0
    """Bytes live for the whole step (parameters, their gradients, optimizer state, ...)."""
    layer_fwd_start: tuple[int, ...] = ()
    """Forward op index at which layer ``l``'s forward begins (increasing in ``l``)."""
    layer_bwd_start: tuple[int, ...] = ()
    """Backward op index at which layer ``l``'s backward begins (decreasing in ``l``)."""
    fwd_op_names: tuple[str, ...] = ()
    """The FX node name of each forward op (empty where not known: synthetic problems)."""
    bwd_op_names: tuple[str, ...] = ()
    """The FX node name of each backward op."""

    def __post_init__(self) -> None:
        if len(self.fwd_op_s) != len(self.fwd_live_bytes):
            raise ValueError("fwd_op_s and fwd_live_bytes differ in length")
        if len(self.bwd_op_s) != len(self.bwd_live_bytes):
            raise ValueError("bwd_op_s and bwd_live_bytes differ in length")
        if self.fwd_op_names and len(self.fwd_op_names) != len(self.fwd_op_s):
            raise ValueError("fwd_op_names and fwd_op_s differ in length")
        if self.bwd_op_names and len(self.bwd_op_names) != len(self.bwd_op_s):
            raise ValueError("bwd_op_names and bwd_op_s differ in length")
        if len(self.layer_fwd_start) != len(self.layer_bwd_start):
            raise ValueError("layer_fwd_start and layer_bwd_start differ in length")
        f, b = self.layer_fwd_start, self.layer_bwd_start
        if any(x >= y for x, y in zip(f, f[1:])) or any(x <= y for x, y in zip(b, b[1:])):
            raise ValueError("layer starts must increase in forward and decrease in backward")
        if any(not 0 <= x < len(self.fwd_op_s) for x in f) or any(
            not 0 <= x < len(self.bwd_op_s) for x in b
        ):
            raise ValueError("a layer start lies outside the op range")

    @property
    def n_fwd(self) -> int:
        return len(self.fwd_op_s)

    @property
    def n_positions(self) -> int:
        return len(self.fwd_op_s) + len(self.bwd_op_s)

    @property
    def n_layers(self) -> int:
        return len(self.layer_fwd_start)

    @cached_property
    def op_s(self) -> tuple[float, ...]:
        """Seconds per position (forward then backward)."""
        return tuple(self.fwd_op_s) + tuple(self.bwd_op_s)

    @cached_property
    def start_s(self) -> tuple[float, ...]:
        """Start time of each position without any overhead; ``start_s[-1]`` is the step time."""
        out = [0.0]
        for t in self.op_s:
            out.append(out[-1] + t)
        return tuple(out)

    @cached_property
    def base_bytes(self) -> tuple[int, ...]:
        """Non-candidate bytes live at each position (static bytes included)."""
        s = self.static_bytes
        return tuple(x + s for x in (*self.fwd_live_bytes, *self.bwd_live_bytes))

    def event_pos(self, event: int) -> int:
        """Position at which layer event ``event`` happens (see the module docstring)."""
        n = self.n_layers
        if not 0 <= event < 2 * n:
            raise ValueError(f"layer event {event} outside 0..{2 * n - 1}")
        if event < n:
            return self.layer_fwd_start[event]
        return self.n_fwd + self.layer_bwd_start[2 * n - 1 - event]


@dataclass(frozen=True)
class OffloadWindow:
    """When one offloaded layer lives on the host.

    Its tensors are freed on the GPU just before position ``release_pos`` (the copy must have
    finished by then) and reallocated, with the copy back issued, just before ``reload_pos``.
    """

    release_pos: int
    reload_pos: int


def lead_windows(timeline: StepTimeline, lead: int) -> dict[int, OffloadWindow]:
    """The windows for a uniform lead ``d``: layer ``l``'s offload finishes when layer ``l+d``'s
    forward begins; its reload starts when layer ``l+d``'s backward begins. Layers without a
    non-empty window (``l + d >= n``) are left out."""
    n = timeline.n_layers
    out = {}
    for layer in range(n - lead):
        out[layer] = OffloadWindow(
            timeline.event_pos(layer + lead), timeline.event_pos(2 * n - 1 - layer - lead)
        )
    return out


@dataclass(frozen=True, kw_only=True)
class PlanningProblem:
    """Candidates plus the timeline, and the clusters whose plans the user fixed."""

    candidates: tuple[Candidate, ...]
    timeline: StepTimeline
    fixed: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Explicit plans the planner must keep: ``cluster_id -> (strategy, count)``, count -1 for
    all occurrences (as in a plan string)."""

    def __post_init__(self) -> None:
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names are not unique")
        seen = set()
        tl = self.timeline
        for c in self.candidates:
            key = (c.cluster_id, c.occurrence)
            if key in seen:
                raise ValueError(f"cluster {c.cluster_id!r} has occurrence {c.occurrence} twice")
            seen.add(key)
            if not 0 <= c.produce_pos <= c.fwd_last < tl.n_fwd:
                raise ValueError(f"{c.name}: forward positions outside 0..{tl.n_fwd - 1}")
            if not 0 <= c.first_bwd_use_pos <= c.bwd_last < len(tl.bwd_op_s):
                raise ValueError(f"{c.name}: backward positions outside the backward")
            if c.nbytes < 0:
                raise ValueError(f"{c.name}: negative size")
            if c.layer is not None and not 0 <= c.layer < tl.n_layers:
                raise ValueError(f"{c.name}: layer {c.layer} outside the timeline's layers")

    @cached_property
    def clusters(self) -> dict[str, tuple[Candidate, ...]]:
        """Candidates per cluster, in forward (occurrence) order; clusters sorted by id."""
        out: dict[str, list[Candidate]] = {}
        for c in self.candidates:
            out.setdefault(c.cluster_id, []).append(c)
        return {k: tuple(sorted(v, key=lambda c: c.occurrence)) for k, v in sorted(out.items())}

    @cached_property
    def by_name(self) -> dict[str, Candidate]:
        return {c.name: c for c in self.candidates}

    @cached_property
    def memo(self) -> dict:
        """What the solver derives from this problem whatever the budget (its search spaces,
        their enumerations: memopt.planner.space.space_of; problems made from it:
        :func:`derived`), kept with the problem for every budget it is solved at (a step
        menu asks twenty, a step plan's re-plans ask them again)."""
        return {}

    def __getstate__(self) -> dict:
        """Pickled (memopt.report_cache keeps a region's problem) and copied without
        :attr:`memo`: what it holds is rebuilt on demand."""
        state = dict(self.__dict__)
        state.pop("memo", None)
        return state

    def saved_bytes_baseline(self) -> int:
        """Saved-activation bytes of the unoptimized plan (every candidate kept)."""
        return sum(c.nbytes for c in self.candidates)


def covered(cands: Sequence[Candidate], count: int) -> tuple[Candidate, ...]:
    """The candidates a plan with this Count covers (-1: all; N: occurrence < N)."""
    if count < 0:
        return tuple(cands)
    return tuple(c for c in cands if c.occurrence < count)


_T = TypeVar("_T")


def derived(problem: PlanningProblem, key: Hashable, make: Callable[[], _T]) -> _T:
    """``make()``, made once per ``problem`` and ``key`` (kept in its memo): a problem made
    from another (a correction, a fixed cluster, the held-bytes variant) is the same object
    each time it is asked for, so its own memo serves every later solve of it."""
    memo = problem.memo
    key = ("derived", key)
    if key not in memo:
        memo[key] = make()
    return memo[key]
