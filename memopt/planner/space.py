"""The search space for one offload lead: what each cluster may choose and what it costs.

A cluster's *option* is ``(strategy, n)``: the first ``n`` candidates (forward order) take the
strategy, the others are kept -- exactly what one plan string can say. ``(KEEP, 0)`` is always
an option. ``n`` runs up to the longest prefix on which the strategy is valid.

A *state* is one option per searchable cluster (a list indexed like ``Space.clusters``).
Memory is additive: ``curve = base - sum of each cluster's savings``, where ``base`` has every
searchable cluster kept and the fixed (user) plans applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.costs import DeviceRates
from memopt.planner.memory import (
    Interval,
    add_intervals,
    curve_from_diff,
    intervals,
    strategy_valid,
    value_at,
)
from memopt.planner.problem import Candidate, OffloadWindow, PlanningProblem, covered, lead_windows
from memopt.planner.timing import OffloadItem, StepTime, offload_item, recompute_s, simulate_step

Option = tuple[Strategy, int]
State = list[Option]
KEEP0: Option = (Strategy.KEEP, 0)
_MOVES = (Strategy.RECOMPUTE, Strategy.COMPROMISE, Strategy.OFFLOAD)


@dataclass
class ClusterSpace:
    """One searchable cluster."""

    cid: str
    cands: tuple[Candidate, ...]
    maxn: dict[Strategy, int]
    """Longest valid prefix per strategy (0: not available)."""
    ivs: list[dict[Strategy, list[Interval]]]
    """Per candidate: live intervals per valid strategy (keep included)."""
    rcost: list[dict[Strategy, float]]
    """Per candidate: recompute seconds per valid strategy."""

    def options(self) -> list[Option]:
        out = [KEEP0]
        for s in _MOVES:
            out += [(s, n) for n in range(1, self.maxn[s] + 1)]
        return out

    def decision(self, idx: int, opt: Option) -> Strategy:
        return opt[0] if idx < opt[1] else Strategy.KEEP


class Space:
    """Clusters, base curve and evaluators for one lead (``None``: no offload)."""

    def __init__(self, problem: PlanningProblem, rates: DeviceRates, lead: int | None) -> None:
        self.problem = problem
        self.rates = rates
        self.lead = lead
        tl = problem.timeline
        self.n_fwd = tl.n_fwd
        self.windows: dict[int, OffloadWindow] = {} if lead is None else lead_windows(tl, lead)
        self.notes: list[str] = []
        self.fixed_decisions: dict[str, Strategy] = {}
        self.clusters: list[ClusterSpace] = []
        diff = [0] * (tl.n_positions + 1)
        for cid, cands in problem.clusters.items():
            if cid in problem.fixed:
                self._add_fixed(cid, cands, diff)
                continue
            cs = self._cluster(cid, cands)
            for c in cands:
                add_intervals(diff, intervals(c, Strategy.KEEP, self.n_fwd))
            if any(cs.maxn.values()):
                self.clusters.append(cs)
        self.base = curve_from_diff(tl.base_bytes, diff)
        self._fixed_rec: dict[int, float] = {}
        self._fixed_off: list[OffloadItem] = []
        for name, s in self.fixed_decisions.items():
            c = problem.by_name[name]
            self._add_sim_input(c, s, self._fixed_rec, self._fixed_off)

    def window(self, c: Candidate) -> OffloadWindow | None:
        return None if c.layer is None else self.windows.get(c.layer)

    def _cluster(self, cid: str, cands: Sequence[Candidate]) -> ClusterSpace:
        maxn = dict.fromkeys(_MOVES, 0)
        live = set(_MOVES)
        ivs, rcost = [], []
        for c in cands:
            w = self.window(c)
            per: dict[Strategy, list[Interval]] = {
                Strategy.KEEP: intervals(c, Strategy.KEEP, self.n_fwd)
            }
            rc: dict[Strategy, float] = {}
            for s in _MOVES:
                if strategy_valid(c, s, w, self.n_fwd):
                    per[s] = intervals(c, s, self.n_fwd, w)
                    rc[s] = recompute_s(c, s, self.rates)
                    if s in live:
                        maxn[s] += 1
                else:
                    live.discard(s)
            ivs.append(per)
            rcost.append(rc)
        return ClusterSpace(cid, tuple(cands), maxn, ivs, rcost)

    def _add_fixed(self, cid: str, cands: Sequence[Candidate], diff: list[int]) -> None:
        s, count = self.problem.fixed[cid]
        s = Strategy(s)
        chosen = {c.name for c in covered(cands, count)}
        skipped = []
        for c in cands:
            d = s if c.name in chosen else Strategy.KEEP
            w = self.window(c)
            if not strategy_valid(c, d, w, self.n_fwd):
                skipped.append(c.name)
                d = Strategy.KEEP
            if d != Strategy.KEEP:
                self.fixed_decisions[c.name] = d
            add_intervals(diff, intervals(c, d, self.n_fwd, w))
        if skipped:
            why = f"with lead {self.lead}" if s == Strategy.OFFLOAD else "here"
            self.notes.append(
                f"explicit plan {cid}:{int(s)}:{count} cannot apply to {', '.join(skipped)} "
                f"{why}; predicted as kept"
            )

    # ------------------------------------------------------------------ evaluation

    def _add_sim_input(
        self, c: Candidate, s: Strategy, rec: dict[int, float], off: list[OffloadItem]
    ) -> None:
        if s in (Strategy.RECOMPUTE, Strategy.COMPROMISE):
            pos = self.n_fwd + c.first_bwd_use_pos
            rec[pos] = rec.get(pos, 0.0) + recompute_s(c, s, self.rates)
        elif s == Strategy.OFFLOAD:
            off.append(offload_item(c, self.windows[c.layer], self.n_fwd))  # type: ignore[index]

    def decisions(self, state: State) -> dict[str, Strategy]:
        """Per-candidate decisions of a state (fixed plans included; keep left out)."""
        out = dict(self.fixed_decisions)
        for cs, opt in zip(self.clusters, state):
            for c in cs.cands[: opt[1]]:
                out[c.name] = opt[0]
        return out

    def step_time(self, state: State) -> StepTime:
        rec = dict(self._fixed_rec)
        off = list(self._fixed_off)
        for cs, (s, n) in zip(self.clusters, state):
            if s == Strategy.KEEP:
                continue
            for c in cs.cands[:n]:
                self._add_sim_input(c, s, rec, off)
        return simulate_step(self.problem.timeline, self.rates, rec, off)

    def curve(self, state: State) -> list[int]:
        diff = [0] * (len(self.base) + 1)
        for cs, opt in zip(self.clusters, state):
            s, n = opt
            for i in range(n):
                add_intervals(diff, cs.ivs[i][Strategy.KEEP], -1)
                add_intervals(diff, cs.ivs[i][s], 1)
        return curve_from_diff(self.base, diff)

    def saves_at(self, cs: ClusterSpace, pos: int) -> dict[Strategy, list[int]]:
        """Bytes saved at ``pos`` (vs. keep) by ``(s, n)``, as ``out[s][n]`` for n = 0..maxn."""
        out = {}
        keep_vals = None
        for s in _MOVES:
            m = cs.maxn[s]
            if not m:
                continue
            if keep_vals is None:
                keep_vals = [value_at(cs.ivs[i][Strategy.KEEP], pos) for i in range(len(cs.cands))]
            acc = [0]
            for i in range(m):
                acc.append(acc[-1] + keep_vals[i] - value_at(cs.ivs[i][s], pos))
            out[s] = acc
        return out

    def change_pieces(self, cs: ClusterSpace, old: Option, new: Option) -> list[Interval]:
        """Disjoint intervals with the memory change of switching ``cs`` from ``old`` to ``new``."""
        if old[0] == new[0]:
            lo, hi = sorted((old[1], new[1]))
        else:
            lo, hi = 0, max(old[1], new[1])
        delta: dict[int, int] = {}
        for i in range(lo, hi):
            for opt, sign in ((old, -1), (new, 1)):
                for s, e, b in cs.ivs[i][cs.decision(i, opt)]:
                    delta[s] = delta.get(s, 0) + sign * b
                    delta[e] = delta.get(e, 0) - sign * b
        out = []
        run = 0
        keys = sorted(delta)
        for a, b in zip(keys, keys[1:]):
            run += delta[a]
            if run:
                out.append((a, b, run))
        return out
