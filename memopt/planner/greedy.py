"""Primal search: cheapest savings first at the current peak, then give back what is not needed.

1. *Descend.* At the position ``t`` of the current peak, every cluster offers its next move:
   the option with the smallest extra seconds per byte saved at ``t`` (the next vertex of the
   cluster's cost/savings hull, which is how the LP of a multiple-choice knapsack is solved).
   Moves are taken cheapest-ratio first until ``t`` fits; then the peak is found again. Offload
   costs are estimated per layer (the link's share of one layer's compute) and checked with the
   step simulation when a move is taken (lazy evaluation: estimates only err low when more is
   offloaded, so a move whose checked ratio still leads is the right one).
2. *Tighten.* With the whole curve at hand, each cluster is moved to the cheapest option that
   keeps every position within the budget (fewer occurrences, or another strategy).

The same descent with no budget finds the smallest peak it can reach (for infeasible budgets).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.space import KEEP0, ClusterSpace, Option, Space, State

_TOL = 1e-12


@dataclass
class Descent:
    state: State
    peak: int
    reached: bool
    """Whether the budget was met."""
    best_peak: int
    best_state: State
    """The state with the smallest peak seen (equals ``state`` when the budget was met)."""


class _Costs:
    """Estimated seconds of each cluster option (recompute exact, offload estimated)."""

    def __init__(self, space: Space) -> None:
        self.space = space
        tl = space.problem.timeline
        start = tl.start_s
        d = space.lead or 1
        self.wf: dict[int, float] = {}
        self.wb: dict[int, float] = {}
        for layer, w in space.windows.items():
            self.wf[layer] = (start[w.release_pos] - start[tl.layer_fwd_start[layer]]) / d
            self.wb[layer] = (start[tl.n_fwd + tl.layer_bwd_start[layer]] - start[w.reload_pos]) / d
        self.loads: dict[int, int] = {}
        for name, s in space.fixed_decisions.items():
            if s == Strategy.OFFLOAD:
                c = space.problem.by_name[name]
                self.loads[c.layer] = self.loads.get(c.layer, 0) + c.nbytes  # type: ignore[index]

    def layer_s(self, layer: int, nbytes: int) -> float:
        r = self.space.rates
        return max(0.0, nbytes / r.d2h_bytes_per_s - self.wf[layer]) + max(
            0.0, nbytes / r.h2d_bytes_per_s - self.wb[layer]
        )

    def move_loads(self, cs: ClusterSpace, opt: Option, sign: int) -> None:
        if opt[0] != Strategy.OFFLOAD:
            return
        for c in cs.cands[: opt[1]]:
            self.loads[c.layer] = self.loads.get(c.layer, 0) + sign * c.nbytes  # type: ignore[index]

    def arrays(self, cs: ClusterSpace, current: Option) -> dict[Strategy, list[float]]:
        """``out[s][n]``: estimated seconds of option ``(s, n)`` given the other clusters."""
        out = {}
        for s, m in cs.maxn.items():
            if not m:
                continue
            acc = [0.0]
            if s != Strategy.OFFLOAD:
                for i in range(m):
                    acc.append(acc[-1] + cs.rcost[i][s])
            else:
                self.move_loads(cs, current, -1)
                own: dict[int, int] = {}
                for c in cs.cands[:m]:
                    lay = c.layer
                    other = self.loads.get(lay, 0)  # type: ignore[arg-type]
                    before = own.get(lay, 0)  # type: ignore[arg-type]
                    own[lay] = before + c.nbytes  # type: ignore[index]
                    acc.append(
                        acc[-1]
                        + self.layer_s(lay, other + before + c.nbytes)  # type: ignore[arg-type]
                        - self.layer_s(lay, other + before)  # type: ignore[arg-type]
                    )
                self.move_loads(cs, current, 1)
            out[s] = acc
        return out


def _next_move(saves, costs, current: Option) -> tuple[float, Option, int] | None:
    s0, n0 = current
    save0 = saves[s0][n0] if n0 else 0
    cost0 = costs[s0][n0] if n0 else 0.0
    best = None
    for s, arr in saves.items():
        carr = costs[s]
        for n in range(1, len(arr)):
            ds = arr[n] - save0
            if ds <= 0:
                continue
            r = (carr[n] - cost0) / ds
            if best is None or r < best[0] - _TOL or (abs(r - best[0]) <= _TOL and ds < best[2]):
                best = (r, (s, n), ds)
    return best


def descend(space: Space, budget: int | None, max_moves: int = 100_000) -> Descent:
    """Greedy descent from all-keep; ``budget=None`` descends as far as it can (min peak)."""
    run = _Descender(space, max_moves)
    return run.go(budget)


class _Descender:
    def __init__(self, space: Space, max_moves: int) -> None:
        self.space = space
        self.max_moves = max_moves
        self.state: State = [KEEP0] * len(space.clusters)
        self.costs = _Costs(space)
        self.moves = 0
        self.version = 0
        self._sim: tuple[int, float] | None = None

    def overhead(self) -> float:
        if self._sim is None or self._sim[0] != self.version:
            self._sim = (self.version, self.space.step_time(self.state).overhead_s)
        return self._sim[1]

    def go(self, budget: int | None) -> Descent:
        curve = self.space.curve(self.state)
        peak = max(curve)
        best = (peak, list(self.state))
        while (budget is None or peak > budget) and self.moves < self.max_moves:
            t = curve.index(peak)
            if budget is not None:
                target = budget
            else:
                target = max(curve[:t] + curve[t + 1 :], default=0)
            applied = self.epoch(t, curve[t], target)
            curve = self.space.curve(self.state)
            peak = max(curve)
            if peak < best[0]:
                best = (peak, list(self.state))
            if not applied:
                break  # nothing saves memory at t any more
        reached = budget is not None and peak <= budget
        return Descent(self.state, peak, reached, best[0], best[1])

    def epoch(self, t: int, cur_t: int, target: int) -> int:
        """Take the cheapest moves at position ``t`` until it is at ``target``; count them."""
        space, state = self.space, self.state
        saves = [space.saves_at(cs, t) for cs in space.clusters]
        carr = [self.costs.arrays(cs, state[i]) for i, cs in enumerate(space.clusters)]
        cver = [0] * len(state)
        heap: list = []
        for i in range(len(state)):
            self._push(heap, i, saves[i], carr[i], cver[i])
        applied = 0
        while heap and self.moves < self.max_moves:
            _ratio, checked, i, ver, opt = heapq.heappop(heap)
            if ver != cver[i]:
                continue
            old = state[i]
            ds = saves[i][opt[0]][opt[1]] - (saves[i][old[0]][old[1]] if old[1] else 0)
            if Strategy.OFFLOAD in (old[0], opt[0]) and checked != self.version:
                trial = list(state)
                trial[i] = opt
                exact = (space.step_time(trial).overhead_s - self.overhead()) / ds
                if heap and exact > heap[0][0] + _TOL:
                    heapq.heappush(heap, (exact, self.version, i, ver, opt))
                    continue
            self.costs.move_loads(space.clusters[i], old, -1)
            self.costs.move_loads(space.clusters[i], opt, 1)
            state[i] = opt
            cur_t -= ds
            cver[i] += 1
            self.version += 1
            self.moves += 1
            applied += 1
            self._push(heap, i, saves[i], carr[i], cver[i])
            if cur_t <= target:
                break
        return applied

    def _push(self, heap: list, i: int, saves, costs, ver: int) -> None:
        mv = _next_move(saves, costs, self.state[i])
        if mv is not None:
            heapq.heappush(heap, (mv[0], -1, i, ver, mv[1]))


def tighten(space: Space, state: State, budget: int, passes: int = 2) -> State:
    """Move clusters to cheaper options while every position stays within ``budget``."""
    state = list(state)
    curve = space.curve(state)

    def fits(i: int, new: Option) -> bool:
        for a, b, d in space.change_pieces(space.clusters[i], state[i], new):
            if d > 0 and max(curve[a:b]) + d > budget:
                return False
        return True

    def smallest_fit(i: int, s: Strategy, lo: int, hi: int) -> int | None:
        """Smallest n in [lo, hi] with (s, n) fitting (assumes more n saves more)."""

        def opt(n: int) -> Option:
            return KEEP0 if n == 0 else (s, n)

        if hi < lo or not fits(i, opt(hi)):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(i, opt(mid)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def delta_s(i: int, new: Option) -> float:
        old = state[i]
        if Strategy.OFFLOAD in (old[0], new[0]):
            trial = list(state)
            trial[i] = new
            return space.step_time(trial).overhead_s - space.step_time(state).overhead_s
        cs = space.clusters[i]
        return sum(cs.rcost[k].get(new[0], 0.0) for k in range(new[1])) - sum(
            cs.rcost[k].get(old[0], 0.0) for k in range(old[1])
        )

    for _ in range(passes):
        changed = False
        for i, cs in enumerate(space.clusters):
            s0, n0 = state[i]
            if s0 == Strategy.KEEP:
                continue
            tries: list[Option] = []
            n = smallest_fit(i, s0, 0, n0 - 1)
            if n is not None:
                tries.append(KEEP0 if n == 0 else (s0, n))
            for s, m in cs.maxn.items():
                if s != s0 and m:
                    n = smallest_fit(i, s, 1, m)
                    if n is not None:
                        tries.append((s, n))
            scored = [(delta_s(i, opt), opt) for opt in tries]
            scored = [x for x in scored if x[0] < -_TOL or (x[0] <= _TOL and x[1][1] < n0)]
            if not scored:
                continue
            _, opt = min(scored, key=lambda x: (x[0], x[1][1]))
            for a, b, d in space.change_pieces(cs, state[i], opt):
                curve[a:b] = [x + d for x in curve[a:b]]
            state[i] = opt
            changed = True
        if not changed:
            break
    return state
