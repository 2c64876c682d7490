"""Liveness of the step: when each candidate occupies device memory under each strategy.

A candidate produced at forward op ``p``, last read in the forward at ``lf``, first read in the
backward at ``f`` and last at ``lb`` (positions as in :mod:`memopt.planner.problem`, ``F`` the
number of forward ops) is live at::

    keep        [p, F+lb]
    recompute   [p, lf]  and  [F+f, F+lb]   (+ recompute_temp_bytes at F+f)
                (not [p, lf] when Inductor fuses it into its readers once unsaved)
                (to F+lb-1 when the reader at lb writes its output in place: keep too, for a
                donated saved tensor)
                (plus, at their last readers, the buffers of such reused candidates that its
                subgraph reads: its recompute is one more reader: ``reuse_undone``)
                (plus, recomputed, what the kernel it fuses into makes: ``fused_charges``)
    compromise  [p, lf]  and  [F+f, F+lb],  plus compromise_kept_bytes over [p, F+f-1]
    offload     [p, R-1] and  [Q, F+lb]     (R, Q: its layer's release and reload positions)

The peak is the maximum over positions of the non-candidate bytes plus these. Offload is
valid only when ``lf < R <= Q <= F+f`` (no forward use after the release, reload in time).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.problem import Candidate, OffloadWindow, PlanningProblem

#: (start, end, bytes): ``bytes`` live at positions ``start <= pos < end``.
Interval = tuple[int, int, int]


def offload_valid(c: Candidate, window: OffloadWindow | None, n_fwd: int) -> bool:
    """Whether ``c`` can be offloaded within ``window``."""
    if window is None or not c.offloadable or c.layer is None:
        return False
    r, q = window.release_pos, window.reload_pos
    return c.fwd_last < r < q <= n_fwd + c.first_bwd_use_pos


def strategy_valid(
    c: Candidate, strategy: Strategy, window: OffloadWindow | None, n_fwd: int
) -> bool:
    """Whether ``strategy`` can apply to ``c`` (offload within its layer's window)."""
    if strategy == Strategy.KEEP:
        return True
    if strategy == Strategy.RECOMPUTE:
        return c.recomputable and not c.compromise_only
    if strategy == Strategy.COMPROMISE:
        return c.has_compromise
    return offload_valid(c, window, n_fwd)


def applied_strategy(c: Candidate, strategy: Strategy) -> Strategy:
    """What ``strategy`` does to ``c`` once applied: keep for a ``kept_by_chain`` candidate
    under recompute or compromise (decide keeps it), else ``strategy`` itself."""
    if c.kept_by_chain and strategy in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
        return Strategy.KEEP
    return strategy


def intervals(
    c: Candidate, strategy: Strategy, n_fwd: int, window: OffloadWindow | None = None
) -> list[Interval]:
    """Where ``c`` is live under ``strategy`` (end exclusive; empty intervals left out)."""
    strategy = applied_strategy(c, strategy)
    p, lf = c.produce_pos, c.fwd_last
    f, lb = n_fwd + c.first_bwd_use_pos, n_fwd + c.bwd_last
    nb = c.nbytes
    if strategy == Strategy.KEEP:
        out = [(p, lb + (0 if c.reused_when_kept else 1), nb)]
    elif strategy in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
        fwd = 0 if c.fused_unless_saved else nb
        end = lb + (0 if c.reused_when_recomputed else 1)
        out = [(p, lf + 1, fwd), (f, end, nb), (f, f + 1, c.recompute_temp_bytes)]
        out += [(n_fwd + q, n_fwd + q + 1, b) for q, b in c.reuse_undone]
        if strategy == Strategy.RECOMPUTE:
            out += [(n_fwd + q, n_fwd + q + 1, b) for q, b in c.fused_charges]
    if strategy == Strategy.COMPROMISE:
        kept = c.compromise_kept_bytes or 0
        out.append((p, f, kept))
    elif strategy == Strategy.OFFLOAD:
        if window is None:
            raise ValueError(f"{c.name}: offload needs its layer's window")
        out = [(p, window.release_pos, nb), (window.reload_pos, lb + 1, nb)]
    return [iv for iv in out if iv[1] > iv[0] and iv[2] != 0]


def add_intervals(diff: list[int], ivs: list[Interval], sign: int = 1) -> None:
    """Add intervals to a difference array (``len(diff) == n_positions + 1``)."""
    for s, e, b in ivs:
        diff[s] += sign * b
        diff[e] -= sign * b


def curve_from_diff(base: tuple[int, ...] | list[int], diff: list[int]) -> list[int]:
    """Prefix-sum a difference array on top of the non-candidate bytes."""
    return list(map(operator.add, base, itertools.accumulate(diff)))


def chain_intervals(problem: PlanningProblem, decisions: Mapping[str, Strategy]) -> list[Interval]:
    """Recompute chains start early: a recomputed tensor that another recompute reads is
    rebuilt with the first of its (transitive) recomputed readers, before its own first
    backward use. The extra liveness, ``[F+min f of the chain, F+f)``, for every such tensor
    (``f`` as in the module docstring); empty without chains."""
    rebuilt = {}
    for c in problem.candidates:
        s = applied_strategy(c, Strategy(decisions.get(c.name, Strategy.KEEP)))
        if s in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
            rebuilt[c.name] = (
                c,
                c.recompute_reads if s == Strategy.RECOMPUTE else c.compromise_reads,
            )
    readers: dict[str, list[str]] = {}
    for name, (_c, reads) in rebuilt.items():
        for r in reads:
            if r in rebuilt and r != name:
                readers.setdefault(r, []).append(name)
    if not readers:
        return []
    start: dict[str, int] = {}

    def first(name: str, stack: frozenset = frozenset()) -> int:
        if name not in start:
            own = rebuilt[name][0].first_bwd_use_pos
            more = [first(r, stack | {name}) for r in readers.get(name, ()) if r not in stack]
            start[name] = min([own, *more])
        return start[name]

    n_fwd = problem.timeline.n_fwd
    out = []
    for name in readers:
        c = rebuilt[name][0]
        if first(name) < c.first_bwd_use_pos:
            out.append((n_fwd + start[name], n_fwd + c.first_bwd_use_pos, c.nbytes))
    return out


def remade(problem: PlanningProblem, decisions: Mapping[str, Strategy]) -> dict[str, int]:
    """The candidates a recompute remakes without being recomputed themselves, with the
    backward op where: a recompute whose subgraph makes other candidates (``rerun_with``: a
    multi-output op's other outputs, nodes of its subgraph) remakes those kept or offloaded by
    the plan, at its own or their first backward use, the earlier (the partitioner saves none
    of them)."""
    out: dict[str, int] = {}
    for c in problem.candidates:
        if not c.rerun_with:
            continue
        if (
            applied_strategy(c, Strategy(decisions.get(c.name, Strategy.KEEP)))
            != Strategy.RECOMPUTE
        ):
            continue
        for name in c.rerun_with:
            m = problem.by_name.get(name)
            if m is None:
                continue
            s = applied_strategy(m, Strategy(decisions.get(name, Strategy.KEEP)))
            if s in (Strategy.KEEP, Strategy.OFFLOAD):
                at = min(m.first_bwd_use_pos, c.first_bwd_use_pos)
                out[name] = min(out.get(name, at), at)
    return out


def rerun_intervals(
    problem: PlanningProblem,
    decisions: Mapping[str, Strategy],
    windows: Mapping[int, OffloadWindow] | None = None,
) -> list[Interval]:
    """The change to the curve of the candidates a rerun remakes (:func:`remade`): their own
    intervals out; in, the forward part as recomputed and the remade tensor from the rerun to
    its last backward read. Empty without multi-output reruns."""
    got = remade(problem, decisions)
    if not got:
        return []
    windows = windows or {}
    n_fwd = problem.timeline.n_fwd
    out: list[Interval] = []
    for name, at in got.items():
        c = problem.by_name[name]
        s = Strategy(decisions.get(name, Strategy.KEEP))
        w = windows.get(c.layer) if c.layer is not None else None
        out += [(a, e, -b) for a, e, b in intervals(c, s, n_fwd, w)]
        end = n_fwd + c.bwd_last + (0 if c.reused_when_recomputed else 1)
        fwd = 0 if c.fused_unless_saved else c.nbytes
        out += [(c.produce_pos, c.fwd_last + 1, fwd), (n_fwd + at, end, c.nbytes)]
    return [iv for iv in out if iv[1] > iv[0] and iv[2] != 0]


@dataclass(frozen=True)
class MemoryProfile:
    """Predicted device memory over the step."""

    curve: tuple[int, ...]
    """Bytes live at each position."""
    peak: int
    peak_pos: int
    n_fwd: int
    """Number of forward positions (to tell the phase of the peak)."""

    @property
    def peak_phase(self) -> str:
        return "forward" if self.peak_pos < self.n_fwd else "backward"


def memory_profile(
    problem: PlanningProblem,
    decisions: Mapping[str, Strategy],
    windows: Mapping[int, OffloadWindow] | None = None,
) -> MemoryProfile:
    """The memory curve and peak for per-candidate ``decisions`` (missing names: keep)."""
    tl = problem.timeline
    windows = windows or {}
    diff = [0] * (tl.n_positions + 1)
    for c in problem.candidates:
        s = Strategy(decisions.get(c.name, Strategy.KEEP))
        w = windows.get(c.layer) if c.layer is not None else None
        if not strategy_valid(c, s, w, tl.n_fwd):
            raise ValueError(f"{c.name}: strategy {s.name} does not apply")
        add_intervals(diff, intervals(c, s, tl.n_fwd, w))
    add_intervals(diff, chain_intervals(problem, decisions))
    add_intervals(diff, rerun_intervals(problem, decisions, windows))
    curve = curve_from_diff(tl.base_bytes, diff)
    if not curve:
        return MemoryProfile((), 0, 0, 0)
    peak = max(curve)
    return MemoryProfile(tuple(curve), peak, curve.index(peak), tl.n_fwd)


@dataclass(frozen=True)
class SavedBytes:
    """What the forward leaves for the backward under a plan."""

    on_device: int
    """Saved bytes that stay on the device (kept tensors and compromise stashes)."""
    offloaded: int
    """Saved bytes copied to the host."""

    @property
    def total(self) -> int:
        return self.on_device + self.offloaded


def saved_bytes(problem: PlanningProblem, decisions: Mapping[str, Strategy]) -> SavedBytes:
    """Predicted saved-activation bytes (what a ``saved_tensors_hooks`` probe measures).

    Keep counts ``nbytes``, compromise counts ``compromise_kept_bytes``, recompute counts 0 and
    offload counts ``nbytes`` on the host.
    """
    dev = off = 0
    gone = remade(problem, decisions)
    for c in problem.candidates:
        s = applied_strategy(c, Strategy(decisions.get(c.name, Strategy.KEEP)))
        if c.name in gone:
            continue
        if s == Strategy.KEEP:
            dev += c.nbytes
        elif s == Strategy.COMPROMISE:
            dev += c.compromise_kept_bytes or 0
        elif s == Strategy.OFFLOAD:
            off += c.nbytes
    return SavedBytes(dev, off)
