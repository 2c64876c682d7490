"""The search space for one offload lead: what each cluster may choose and what it costs.

A cluster's *option* is ``(strategy, n)``: the first ``n`` candidates (forward order) take the
strategy, the others are kept -- exactly what one plan string can say. ``(KEEP, 0)`` is always
an option. ``n`` runs up to the longest prefix on which the strategy is valid.

A *state* is one option per searchable cluster (a list indexed like ``Space.clusters``).
Memory is additive: ``curve = base - sum of each cluster's savings``, where ``base`` has every
searchable cluster kept and the fixed (user) plans applied.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.chains import MAX_RECOMPUTE_DEPTH, REBUILT, Chains
from memopt.planner.costs import DeviceRates
from memopt.planner.memory import (
    Interval,
    add_intervals,
    chain_intervals,
    curve_from_diff,
    intervals,
    rerun_intervals,
    strategy_valid,
)
from memopt.planner.problem import Candidate, OffloadWindow, PlanningProblem, covered, lead_windows
from memopt.planner.timing import OffloadItem, StepTime, offload_item, recompute_s, simulate_step

Option = tuple[Strategy, int]
State = list[Option]
KEEP0: Option = (Strategy.KEEP, 0)
MOVES = (Strategy.RECOMPUTE, Strategy.COMPROMISE, Strategy.OFFLOAD)


@dataclass
class ClusterSpace:
    """One searchable cluster, with per-candidate data for each valid strategy."""

    cid: str
    cands: tuple[Candidate, ...]
    maxn: dict[Strategy, int]
    """Longest valid prefix per non-keep strategy (0: not available)."""
    rcost: list[dict[Strategy, float]]
    """Recompute seconds per valid non-keep strategy."""
    saves: list[dict[Strategy, list[Interval]]]
    """Disjoint pieces of bytes saved vs. keep (negative: costs bytes), per valid strategy."""
    use_pos: list[int]
    """Position of the first backward use."""
    items: list[OffloadItem | None]
    """Offload item for the simulation (None when it cannot offload)."""
    rprefix: dict[Strategy, list[float]]
    """``rprefix[s][n]``: recompute seconds of option ``(s, n)`` (0.0 for keep and offload)."""

    def rec_s(self, opt: Option) -> float:
        """Recompute seconds of option ``opt``."""
        s, n = opt
        return self.rprefix[s][n] if n else 0.0

    def options(self) -> list[Option]:
        out = [KEEP0]
        for s in MOVES:
            out += [(s, n) for n in range(1, self.maxn[s] + 1)]
        return out


class Space:
    """Clusters, base curve and evaluators for one lead (``None``: no offload)."""

    def __init__(
        self,
        problem: PlanningProblem,
        rates: DeviceRates,
        lead: int | None,
        shared: dict | None = None,
        strategies: Collection[Strategy] = tuple(Strategy),
        max_recompute_depth: int | None = MAX_RECOMPUTE_DEPTH,
    ) -> None:
        """``shared``: a dict reused across the leads of one problem (lead-independent data);
        ``strategies``: what the planner may choose (explicit plans are taken as given);
        ``max_recompute_depth``: the chain rule of :mod:`memopt.planner.chains` (None: off)."""
        self.problem = problem
        self.moves = tuple(s for s in MOVES if s in strategies)
        self._shared: dict = {} if shared is None else shared
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
            for c in cands:
                add_intervals(diff, intervals(c, Strategy.KEEP, self.n_fwd))
            cs = self._cluster(cid, cands)
            if any(cs.maxn.values()):
                self.clusters.append(cs)
        self.base = curve_from_diff(tl.base_bytes, diff)
        self.chains = self._chains(max_recompute_depth)
        self._chained = any(c.recompute_reads or c.compromise_reads for c in problem.candidates)
        self._reruns = any(c.rerun_with for c in problem.candidates)
        self._rerun_memo: dict[tuple, list] = {}
        self._saves_memo: dict[tuple[int, int], dict[Strategy, list[int]]] = {}
        self._time_memo: dict[tuple[Option, ...], StepTime] = {}
        self._stall_memo: dict[tuple[tuple[int, int], ...], float] = {}
        self._limits_memo: dict[tuple, dict[Strategy, int]] = {}
        self._chain_memo: dict[tuple, list] = {}
        self._enumerated: list[tuple[State, int, float, int]] | None = None
        self._fixed_rec: dict[int, float] = {}
        self._fixed_off: list[OffloadItem] = []
        for name, s in self.fixed_decisions.items():
            c = problem.by_name[name]
            if s == Strategy.OFFLOAD:
                self._fixed_off.append(offload_item(c, self.windows[c.layer], self.n_fwd))  # type: ignore[index]
            else:
                pos = self.n_fwd + c.first_bwd_use_pos
                self._fixed_rec[pos] = self._fixed_rec.get(pos, 0.0) + recompute_s(c, s, rates)

    def window(self, c: Candidate) -> OffloadWindow | None:
        return None if c.layer is None else self.windows.get(c.layer)

    def _cluster(self, cid: str, cands: Sequence[Candidate]) -> ClusterSpace:
        maxn = dict.fromkeys(MOVES, 0)
        live = set(MOVES)
        rcost, saves, items = [], [], []
        for c in cands:
            w = self.window(c)
            keep = intervals(c, Strategy.KEEP, self.n_fwd)
            rc: dict[Strategy, float] = {}
            sv: dict[Strategy, list[Interval]] = {}
            for s in MOVES:
                if s not in self.moves or not strategy_valid(c, s, w, self.n_fwd):
                    live.discard(s)
                    continue
                key = (c.name, s)
                if s == Strategy.OFFLOAD or key not in self._shared:
                    mine = intervals(c, s, self.n_fwd, w)
                    got = (
                        recompute_s(c, s, self.rates),
                        pieces(keep + [(a, b, -d) for a, b, d in mine]),
                    )
                    if s != Strategy.OFFLOAD:
                        self._shared[key] = got
                else:
                    got = self._shared[key]
                rc[s], sv[s] = got
                if s in live:
                    maxn[s] += 1
            rcost.append(rc)
            saves.append(sv)
            items.append(offload_item(c, w, self.n_fwd) if Strategy.OFFLOAD in sv else None)  # type: ignore[arg-type]
        use = [self.n_fwd + c.first_bwd_use_pos for c in cands]
        rprefix: dict[Strategy, list[float]] = {}
        for s, m in maxn.items():
            acc = [0.0]
            for i in range(m):
                acc.append(acc[-1] + rcost[i][s])
            rprefix[s] = acc
        return ClusterSpace(cid, tuple(cands), maxn, rcost, saves, use, items, rprefix)

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

    def _chains(self, max_depth: int | None) -> Chains:
        key = ("chains", max_depth)
        if key not in self._shared:
            cands = self.problem.candidates if max_depth is not None else ()
            self._shared[key] = Chains(cands, max_depth or MAX_RECOMPUTE_DEPTH)
        chains = self._shared[key]
        self._index = {c.name: i for i, c in enumerate(self.problem.candidates)}
        self._fixed_rebuilt = {
            self._index[n]: s for n, s in self.fixed_decisions.items() if s in REBUILT
        }
        if chains.active and not chains.ok(self._fixed_rebuilt):
            chains = Chains((), max_depth)  # never binds
            self.notes.append(
                f"explicit plans chain recomputes deeper than {max_depth}; the planner does "
                "not apply the chain rule"
            )
        return chains

    def chain_limits(self, state: State, ci: int) -> dict[Strategy, int]:
        """Per strategy, the most occurrences of cluster ``ci`` that may be recomputed with
        every other cluster as in ``state`` (the chain rule)."""
        cs = self.clusters[ci]
        if not self.chains.active:
            return cs.maxn
        # memoized on what the other clusters rebuild (descents revisit it); callers only read
        key = (ci, *((k, s, n) for k, (s, n) in enumerate(state) if k != ci and s in REBUILT))
        got = self._limits_memo.get(key)
        if got is not None:
            return got
        chosen = dict(self._fixed_rebuilt)
        for k, (other, (s, n)) in enumerate(zip(self.clusters, state)):
            if k != ci and s in REBUILT:
                chosen.update((self._index[c.name], s) for c in other.cands[:n])
        out = dict(cs.maxn)
        order = [self._index[c.name] for c in cs.cands]
        for s in REBUILT:
            if out[s]:
                out[s] = self.chains.limit(chosen, order[: out[s]], s)
        self._limits_memo[key] = out
        return out

    def chain_ok(self, state: State) -> bool:
        """Whether ``state`` obeys the chain rule."""
        if not self.chains.active:
            return True
        chosen = dict(self._fixed_rebuilt)
        for cs, (s, n) in zip(self.clusters, state):
            if s in REBUILT:
                chosen.update((self._index[c.name], s) for c in cs.cands[:n])
        return self.chains.ok(chosen)

    # ------------------------------------------------------------------ evaluation

    def enumerated(self) -> list[tuple[State, int, float, int]]:
        """Every state that obeys the chain rule, in product order, as ``(state, peak,
        overhead seconds rounded to 1e-12, changed candidates)``; computed once (the solver
        filters it by each budget)."""
        if self._enumerated is None:
            out = []
            for combo in itertools.product(*(cs.options() for cs in self.clusters)):
                state = list(combo)
                if self.chain_ok(state):
                    peak = max(self.curve(state))
                    overhead = round(self._step_time(state).overhead_s, 12)
                    out.append((state, peak, overhead, sum(n for _, n in state)))
            self._enumerated = out
        return self._enumerated

    def decisions(self, state: State) -> dict[str, Strategy]:
        """Per-candidate decisions of a state (fixed plans included; keep left out)."""
        out = dict(self.fixed_decisions)
        for cs, (s, n) in zip(self.clusters, state):
            for c in cs.cands[:n]:
                out[c.name] = s
        return out

    def step_time(self, state: State) -> StepTime:
        """Simulated step time of a state (memoized: descents and restarts revisit states)."""
        key = tuple(state)
        got = self._time_memo.get(key)
        if got is None:
            got = self._time_memo[key] = self._step_time(state)
        return got

    def _step_time(self, state: State) -> StepTime:
        rec = dict(self._fixed_rec)
        off = list(self._fixed_off)
        for cs, (s, n) in zip(self.clusters, state):
            if s == Strategy.OFFLOAD:
                off += cs.items[:n]  # type: ignore[arg-type]
            elif s != Strategy.KEEP:
                for i in range(n):
                    pos = cs.use_pos[i]
                    rec[pos] = rec.get(pos, 0.0) + cs.rcost[i][s]
        return simulate_step(self.problem.timeline, self.rates, rec, off)

    def stall_s(self, state: State) -> float:
        """Copy stalls (and the copies' CPU time) of a state, simulated without recompute (faster; recompute time only
        adds room for reloads to hide). Memoized on the offload options alone."""
        key = tuple((i, n) for i, (s, n) in enumerate(state) if s == Strategy.OFFLOAD and n)
        got = self._stall_memo.get(key)
        if got is not None:
            return got
        off = list(self._fixed_off)
        for i, n in key:
            off += self.clusters[i].items[:n]  # type: ignore[arg-type]
        got = 0.0
        if off:
            t = simulate_step(self.problem.timeline, self.rates, {}, off)
            got = t.offload_s
        self._stall_memo[key] = got
        return got

    def curve(self, state: State) -> list[int]:
        """Bytes live at each position under ``state``, recompute chains rebuilt early
        included (:func:`memopt.planner.memory.chain_intervals`), and the outputs a rerun
        multi-output op remakes (:func:`memopt.planner.memory.rerun_intervals`)."""
        diff = [0] * (len(self.base) + 1)
        for cs, (s, n) in zip(self.clusters, state):
            for i in range(n):
                for a, b, d in cs.saves[i][s]:
                    diff[a] -= d
                    diff[b] += d
        if self._chained:  # memoized on what the state rebuilds: descents revisit it
            key = tuple((k, s, n) for k, (s, n) in enumerate(state) if s in REBUILT and n)
            ivs = self._chain_memo.get(key)
            if ivs is None:
                ivs = self._chain_memo[key] = chain_intervals(self.problem, self.decisions(state))
            add_intervals(diff, ivs)
        if self._reruns:  # outputs of a rerun multi-output op (rerun_intervals)
            key = tuple(state)
            ivs = self._rerun_memo.get(key)
            if ivs is None:
                dec = self.decisions(state)
                ivs = self._rerun_memo[key] = rerun_intervals(self.problem, dec, self.windows)
            add_intervals(diff, ivs)
        return curve_from_diff(self.base, diff)

    def saves_at(self, ci: int, pos: int) -> dict[Strategy, list[int]]:
        """Bytes saved at ``pos`` by option ``(s, n)`` of cluster ``ci``, as ``out[s][n]``
        (n = 0..maxn). Memoized: it does not depend on the state."""
        key = (ci, pos)
        out = self._saves_memo.get(key)
        if out is not None:
            return out
        cs = self.clusters[ci]
        out = {}
        for s in MOVES:
            m = cs.maxn[s]
            if not m:
                continue
            acc = [0]
            run = 0
            for i in range(m):
                for a, b, d in cs.saves[i][s]:
                    if a <= pos < b:
                        run += d
                acc.append(run)
            out[s] = acc
        self._saves_memo[key] = out
        return out

    def change_pieces(self, ci: int, old: Option, new: Option) -> list[Interval]:
        """Disjoint pieces of the memory change when cluster ``ci`` goes from ``old`` to ``new``."""
        cs = self.clusters[ci]
        if old[0] == new[0]:
            lo, hi = sorted((old[1], new[1]))
        else:
            lo, hi = 0, max(old[1], new[1])
        raw: list[Interval] = []
        for i in range(lo, hi):
            if i < old[1]:
                raw += cs.saves[i][old[0]]
            if i < new[1]:
                raw += [(a, b, -d) for a, b, d in cs.saves[i][new[0]]]
        return pieces(raw)


def space_of(
    problem: PlanningProblem,
    rates: DeviceRates,
    lead: int | None,
    strategies: Collection[Strategy] = tuple(Strategy),
    max_recompute_depth: int | None = MAX_RECOMPUTE_DEPTH,
) -> Space:
    """``Space(problem, rates, lead, ...)``, made once per problem and arguments (kept in
    ``problem.memo``, with the lead-independent data the leads share): a step menu solves one
    problem at twenty budgets, and its searches revisit the same states (the FSDP2 Llama's
    layer region: 74 enumerations of the same spaces per menu on the CPU)."""
    key = ("space", rates, lead, frozenset(strategies), max_recompute_depth)
    got = problem.memo.get(key)
    if got is None:
        shared = problem.memo.setdefault(("shared", rates), {})
        got = Space(problem, rates, lead, shared, strategies, max_recompute_depth)
        problem.memo[key] = got
    return got


def pieces(raw: list[Interval]) -> list[Interval]:
    """Overlapping ``(start, end, bytes)`` intervals as disjoint pieces with their sums."""
    delta: dict[int, int] = {}
    for a, b, d in raw:
        delta[a] = delta.get(a, 0) + d
        delta[b] = delta.get(b, 0) - d
    out = []
    run = 0
    keys = sorted(delta)
    for a, b in zip(keys, keys[1:]):
        run += delta[a]
        if run:
            out.append((a, b, run))
    return out
