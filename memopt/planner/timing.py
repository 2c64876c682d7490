"""Step time of a plan: baseline op times plus recompute plus the copy time that does not hide.

The simulation walks the step's positions once, with one copy engine per direction::

    forward  op p produces x ──► D2H queue (FIFO, production order) ──► done_x
             layer boundary R:  compute waits until done_x; x is freed
    backward boundary Q:        H2D of the layer's tensors queued (first-use order)
             first use of x:    recompute ops run here; compute waits for x's H2D

Recompute time is inserted before the first backward use. Copies overlap compute fully; what
they cannot hide becomes a stall. Bandwidth contention with kernels is not modelled: measured on
an H100, continuous pinned copies in both directions slowed a compiled Llama step by 1-3%
(``benchmarks/copy_interference.py``). What is modelled is the CPU: each copy costs the compute
stream what the CPU's lead cannot absorb of ``rates.copy_op_s`` (issuing the copy and its
wait): a step starts with the GPU right behind the CPU that launches its kernels, and the CPU
gains ``rates.cpu_lead_gain`` seconds of lead per second of forward compute; an offload op's
CPU time spends that lead first, and the rest is GPU idle time (measured: 11 offloads in layer
0 of the pareto Llama left the GPU idle about 1.2 ms longer than plain torch.compile). Reloads
are not charged: in the backward the CPU is far ahead of the GPU's long kernels, and the same
traces show no idle gaps there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.costs import DeviceRates, ops_s
from memopt.planner.memory import applied_strategy
from memopt.planner.problem import Candidate, OffloadWindow, PlanningProblem, StepTimeline


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds of one training step under a plan."""

    baseline_s: float
    """The step without any memopt decision (sum of op times)."""
    recompute_s: float
    """Time spent in recompute (and compromise) subgraphs."""
    d2h_stall_s: float
    """Forward waits for offload copies at layer boundaries."""
    h2d_stall_s: float
    """Backward waits for reload copies at first uses."""
    copy_ops_s: float = 0.0
    """GPU idle time while the CPU runs offload ops (their CPU time beyond its lead)."""

    @property
    def offload_s(self) -> float:
        """Everything offload costs: stalls and the copies' CPU time."""
        return self.d2h_stall_s + self.h2d_stall_s + self.copy_ops_s

    @property
    def overhead_s(self) -> float:
        return self.recompute_s + self.offload_s

    @property
    def total_s(self) -> float:
        return self.baseline_s + self.overhead_s


#: One offloaded tensor: (name, nbytes, produce_pos, release_pos, reload_pos, use_pos),
#: positions on the step line (``use_pos`` is ``F + first_bwd_use_pos``). Copies queue in
#: production order (ties: list order); reloads issued together queue in first-use order.
OffloadItem = tuple[str, int, int, int, int, int]

_RELEASE, _RELOAD, _RECOMPUTE, _USE, _PRODUCE = range(5)
_IDX = 21  # bits for the item index in an event key: (pos, kind, item) packed into one int


def simulate_step(
    timeline: StepTimeline,
    rates: DeviceRates,
    recompute_at: Mapping[int, float],
    offloads: Sequence[OffloadItem],
) -> StepTime:
    """Step time given recompute seconds per position and the offloaded tensors."""
    mask = (1 << _IDX) - 1
    reloaded: dict[int, list[int]] = {}
    for key in sorted([item[5] << _IDX | i for i, item in enumerate(offloads)]):
        i = key & mask  # each reload group in first-use order (ties: list order)
        reloaded.setdefault(offloads[i][4], []).append(i)
    released = {item[3] for item in offloads}
    events = [(pos << 3 | _RECOMPUTE) << _IDX for pos in recompute_at]
    events += [(pos << 3 | _RELEASE) << _IDX for pos in released]
    events += [(pos << 3 | _RELOAD) << _IDX for pos in reloaded]
    events += [(item[5] << 3 | _USE) << _IDX | i for i, item in enumerate(offloads)]
    events += [(item[2] << 3 | _PRODUCE) << _IDX | i for i, item in enumerate(offloads)]
    events.sort()
    start = timeline.start_s
    d2h_rate, h2d_rate = rates.d2h_bytes_per_s, rates.h2d_bytes_per_s
    op_s, gain = rates.copy_op_s, rates.cpu_lead_gain
    lead_used = ops_idle = 0.0  # CPU lead spent on offload ops; GPU idle they caused
    d2h_free = h2d_free = 0.0
    release_at = dict.fromkeys(released, 0.0)  # when the last copy freed there is done
    h2d_done = [0.0] * len(offloads)
    shift = rec = d2h_stall = h2d_stall = 0.0
    for key in events:
        pos = key >> (_IDX + 3)
        kind = (key >> _IDX) & 7
        if kind == _PRODUCE:  # after the op at pos
            item = offloads[key & mask]
            if op_s:  # the offload op's CPU time, beyond the CPU's lead, delays what follows
                lead = gain * (start[pos + 1] + shift - start[0]) - lead_used
                idle = op_s - lead if lead < op_s else 0.0
                lead_used += op_s - idle
                shift += idle
                ops_idle += idle
            now = start[pos + 1] + shift
            d2h_free = (now if now > d2h_free else d2h_free) + item[1] / d2h_rate
            release_at[item[3]] = d2h_free  # the queue is FIFO: the latest copy ends last
            continue
        now = start[pos] + shift
        if kind == _USE:
            wait = h2d_done[key & mask] - now
            if wait > 0:
                shift += wait
                h2d_stall += wait
        elif kind == _RELEASE:
            wait = release_at[pos] - now
            if wait > 0:
                shift += wait
                d2h_stall += wait
        elif kind == _RELOAD:
            for i in reloaded[pos]:
                h2d_free = (now if now > h2d_free else h2d_free) + offloads[i][1] / h2d_rate
                h2d_done[i] = h2d_free
        else:
            shift += recompute_at[pos]
            rec += recompute_at[pos]
    return StepTime(start[-1], rec, d2h_stall, h2d_stall, ops_idle)


def recompute_s(c: Candidate, strategy: Strategy, rates: DeviceRates) -> float:
    """Seconds of extra compute ``strategy`` costs for ``c`` (0 for keep and offload, and for
    a candidate the plan strings keep anyway: ``kept_by_chain``)."""
    strategy = applied_strategy(c, strategy)
    if strategy == Strategy.RECOMPUTE:
        return ops_s(c.recompute_ops, rates)
    if strategy == Strategy.COMPROMISE:
        ops = c.recompute_ops if c.compromise_ops is None else c.compromise_ops
        return ops_s(ops, rates)
    return 0.0


def offload_item(c: Candidate, window: OffloadWindow, n_fwd: int) -> OffloadItem:
    return (
        c.name,
        c.nbytes,
        c.produce_pos,
        window.release_pos,
        window.reload_pos,
        n_fwd + c.first_bwd_use_pos,
    )


def step_time(
    problem: PlanningProblem,
    decisions: Mapping[str, Strategy],
    rates: DeviceRates,
    windows: Mapping[int, OffloadWindow] | None = None,
) -> StepTime:
    """Predicted step time for per-candidate ``decisions`` (missing names: keep)."""
    tl = problem.timeline
    windows = windows or {}
    rec: dict[int, float] = {}
    offloads: list[OffloadItem] = []
    for c in problem.candidates:
        s = Strategy(decisions.get(c.name, Strategy.KEEP))
        if s in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
            pos = tl.n_fwd + c.first_bwd_use_pos
            rec[pos] = rec.get(pos, 0.0) + recompute_s(c, s, rates)
        elif s == Strategy.OFFLOAD:
            if c.layer is None or c.layer not in windows:
                raise ValueError(f"{c.name}: offload needs a window for its layer")
            offloads.append(offload_item(c, windows[c.layer], tl.n_fwd))
    return simulate_step(tl, rates, rec, offloads)
