"""Primal search: cheapest savings first at the current peak, then give back what is not needed.

1. *Descend.* At the position ``t`` of the current peak, every cluster offers its next move:
   the option with the smallest extra seconds per byte saved at ``t`` (the next vertex of the
   cluster's cost/savings hull, which is how the LP of a multiple-choice knapsack is solved;
   among equally good options the one saving most). Moves are taken cheapest-ratio first until
   ``t`` fits, then the peak is found again. Offload costs are estimated per layer (its share
   of the link over its window) and checked with the step simulation before a move is taken
   (up to ``50 + clusters`` checks per descent); a move whose checked ratio no longer leads
   goes back on the heap (lazy evaluation). A move that saves at ``t`` can cost elsewhere,
   so two positions can trade the peak forever: the descent stops after ``_PATIENCE`` rounds
   without progress and returns the best state it saw. Moves respect the chain rule
   (``Space.chain_limits``). Whether a peak is the smallest possible is for
   :func:`memopt.planner.bounds.peak_floor` to prove.
2. *Tighten.* With the whole curve at hand, each cluster moves to the cheapest option that
   keeps every position within the budget: fewer occurrences (never slower: the step is a
   max-plus system, dropping work cannot delay it), or (first pass) another strategy if the
   simulation says it is faster.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.chains import REBUILT
from memopt.planner.space import KEEP0, Option, Space, State
from memopt.planner.timing import StepTime

_TOL = 1e-12
"""Seconds below which a time difference is noise."""
_TIE = 10.0
"""Ratios (seconds per byte saved) closer than the time to move this many bytes through device
memory count as equal; the larger saving is taken then (tightening gives back the excess)."""
#: A checked offload move is taken if its ratio exceeds the best estimate by at most this
#: fraction (of the estimate, or of the cost of reading a byte once, whichever is larger).
_SLACK = 0.02
#: Epochs without a lower peak (or fewer positions at it) after which a descent stops: moves
#: that save at one position can cost at another, and two positions can trade places forever.
_PATIENCE = 8


@dataclass
class Descent:
    state: State
    peak: int
    reached: bool
    """Whether the budget was met; ``state`` and ``peak`` are the lowest-peak state seen."""


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

    def move_loads(self, ci: int, opt: Option, sign: int) -> None:
        if opt[0] != Strategy.OFFLOAD:
            return
        for c in self.space.clusters[ci].cands[: opt[1]]:
            self.loads[c.layer] = self.loads.get(c.layer, 0) + sign * c.nbytes  # type: ignore[index]

    def arrays(self, ci: int, current: Option) -> dict[Strategy, list[float]]:
        """``out[s][n]``: estimated seconds of option ``(s, n)`` given the other clusters."""
        cs = self.space.clusters[ci]
        out = {}
        for s, m in cs.maxn.items():
            if not m:
                continue
            if s != Strategy.OFFLOAD:
                out[s] = cs.rprefix[s]
                continue
            acc = [0.0]
            self.move_loads(ci, current, -1)
            own: dict[int, int] = {}
            for c in cs.cands[:m]:
                lay: int = c.layer  # type: ignore[assignment]
                other = self.loads.get(lay, 0)
                before = own.get(lay, 0)
                own[lay] = before + c.nbytes
                step = self.layer_s(lay, other + before + c.nbytes) - self.layer_s(
                    lay, other + before
                )
                acc.append(acc[-1] + step)
            self.move_loads(ci, current, 1)
            out[s] = acc
        return out


def _next_move(
    saves, costs, current: Option, tie: float, limits: dict[Strategy, int]
) -> tuple[float, Option] | None:
    """The move of one cluster with the least extra seconds per byte saved; ratios within
    ``tie`` of each other count as equal and the larger saving wins. ``limits``: the largest
    count per strategy (the chain rule)."""
    s0, n0 = current
    save0 = saves[s0][n0] if n0 else 0
    cost0 = costs[s0][n0] if n0 else 0.0
    best = None
    for s, arr in saves.items():
        carr = costs[s]
        for n in range(1, min(len(arr), limits[s] + 1)):
            ds = arr[n] - save0
            if ds <= 0:
                continue
            r = (carr[n] - cost0) / ds
            if best is None or r < best[0] - tie or (r <= best[0] + tie and ds > best[2]):
                best = (r, (s, n), ds)
    return None if best is None else (best[0], best[1])


def descend(
    space: Space,
    budget: int,
    *,
    start: State | None = None,
    frozen: frozenset[int] = frozenset(),
    max_moves: int = 100_000,
) -> Descent:
    """Greedy descent from ``start`` (default all-keep) until the peak fits ``budget`` or
    nothing saves more; clusters in ``frozen`` keep their starting option."""
    return _Descender(space, start, frozen, max_moves).go(budget)


def lowest_peak(space: Space, floor: int = 0, *, gradual: bool = True) -> Descent:
    """The smallest peak the descent finds (``floor``: a proven floor on the peak).

    First every move that saves at each peak position at once; when that does not reach the
    floor and ``gradual``, also a descent whose target is lowered step by step (an eighth of
    the gap to the floor, at least ``1/_LOWER_MIN`` of the peak), each continuing from the
    last state, and the lower of the two wins (:func:`memopt.planner.solver.solve` asks for
    it only in a second solve, when the first finds nothing within the budget). Taking every
    move at once can raise another position above the unplanned peak, from which no move
    saves: a tiny Llama under CPU autocast took all 21 moves at its backward's peak, which put
    a higher peak 25 positions later, and the planner answered "keep everything" to every
    budget below what its descent reached."""
    at_once = descend(space, 0)
    if at_once.peak <= floor or not gradual:
        return at_once
    state: State = [KEEP0] * len(space.clusters)
    peak = max(space.curve(state))
    for _ in range(_LOWER_STEPS):
        step = max((peak - floor) // 8, peak // _LOWER_MIN, 1)
        d = descend(space, peak - step, start=state)
        if d.peak >= peak:
            break
        state, peak = d.state, d.peak
    return min((at_once, Descent(state, peak, False)), key=lambda d: d.peak)


#: Most lowered targets of :func:`lowest_peak`'s gradual descent, and its smallest step (a
#: fraction of the peak): 1/256 lowers a peak to half in at most 178 steps.
_LOWER_STEPS = 64
_LOWER_MIN = 256


class _Descender:
    def __init__(
        self, space: Space, start: State | None, frozen: frozenset[int], max_moves: int
    ) -> None:
        self.space = space
        self.max_moves = max_moves
        self.frozen = frozen
        self.state: State = list(start) if start is not None else [KEEP0] * len(space.clusters)
        self.costs = _Costs(space)
        for i, opt in enumerate(self.state):
            self.costs.move_loads(i, opt, 1)
        self.moves = 0
        self.checks = 0
        self.max_checks = 50 + len(space.clusters)
        self.unit = 1.0 / space.rates.hbm_bytes_per_s  # seconds per byte of a memory-bound op
        self.version = 0
        """Counts moves that change what is offloaded (checked ratios stay valid until then)."""
        self._stall: tuple[int, float] | None = None
        self._trial: tuple[int, int, Option, float] | None = None

    def stall(self) -> float:
        if self._stall is None or self._stall[0] != self.version:
            self._stall = (self.version, self.space.stall_s(self.state))
        return self._stall[1]

    def exact_cost(self, i: int, new: Option) -> float:
        """Simulated seconds of moving cluster ``i`` to ``new`` (stalls without recompute
        overlap, which only helps; recompute seconds are exact and additive)."""
        old = self.state[i]
        trial = list(self.state)
        trial[i] = new
        cs = self.space.clusters[i]
        rec = cs.rec_s(new) - cs.rec_s(old)
        after = self.space.stall_s(trial)
        self._trial = (self.version, i, new, after)
        return after - self.stall() + rec

    def go(self, budget: int) -> Descent:
        curve = self.space.curve(self.state)
        peak = max(curve)
        best = (peak, curve.count(peak), list(self.state))
        stale = 0
        while peak > budget and self.moves < self.max_moves and stale < _PATIENCE:
            t = curve.index(peak)
            applied = self.epoch(t, peak, budget)
            curve = self.space.curve(self.state)
            peak = max(curve)
            if (peak, curve.count(peak)) < best[:2]:
                best, stale = (peak, curve.count(peak), list(self.state)), 0
            else:
                stale += 1
            if not applied:
                break  # nothing saves memory at t any more
        return Descent(best[2], best[0], best[0] <= budget)

    def epoch(self, t: int, cur_t: int, target: int) -> int:
        """Take the cheapest moves at position ``t`` until it is at ``target``; count them."""
        space, state = self.space, self.state
        saves = [space.saves_at(i, t) for i in range(len(state))]
        carr = [self.costs.arrays(i, state[i]) for i in range(len(state))]
        cver = [0] * len(state)
        heap: list = []
        for i in range(len(state)):
            if i not in self.frozen:
                self._push(heap, i, saves[i], carr[i], cver[i])
        applied = 0
        while heap and self.moves < self.max_moves:
            _ratio, checked, i, ver, opt = heapq.heappop(heap)
            if ver != cver[i]:
                continue
            old = state[i]
            if opt[0] in REBUILT and opt[1] > space.chain_limits(state, i)[opt[0]]:
                self._push(heap, i, saves[i], carr[i], ver)  # another move made it too deep
                continue
            ds = saves[i][opt[0]][opt[1]] - (saves[i][old[0]][old[1]] if old[1] else 0)
            offload = Strategy.OFFLOAD in (old[0], opt[0])
            if offload and checked != self.version and self.checks < self.max_checks:
                self.checks += 1
                exact = self.exact_cost(i, opt) / ds
                if heap and exact > heap[0][0] + _SLACK * max(abs(heap[0][0]), self.unit):
                    heapq.heappush(heap, (exact, self.version, i, ver, opt))
                    continue
            self.costs.move_loads(i, old, -1)
            self.costs.move_loads(i, opt, 1)
            state[i] = opt
            cur_t -= ds
            cver[i] += 1
            if offload:
                tr = self._trial
                known = tr is not None and tr[:3] == (self.version, i, opt)
                self.version += 1
                if known:  # the check just simulated this very state
                    self._stall = (self.version, tr[3])  # type: ignore[index]
            self.moves += 1
            applied += 1
            self._push(heap, i, saves[i], carr[i], cver[i])
            if cur_t <= target:
                break
        return applied

    def _push(self, heap: list, i: int, saves, costs, ver: int) -> None:
        limits = self.space.chain_limits(self.state, i)
        mv = _next_move(saves, costs, self.state[i], _TIE * self.unit, limits)
        if mv is not None:
            heapq.heappush(heap, (mv[0], -1, i, ver, mv[1]))


class _Tightener:
    def __init__(self, space: Space, state: State, budget: int) -> None:
        self.space = space
        self.state = list(state)
        self.budget = budget
        self.curve = space.curve(self.state)
        self._time: StepTime | None = None
        self._trial: tuple[int, Option, StepTime] | None = None

    def fits(self, i: int, new: Option) -> bool:
        curve, budget = self.curve, self.budget
        for a, b, d in self.space.change_pieces(i, self.state[i], new):
            if d > 0 and max(curve[a:b]) + d > budget:
                return False
        return True

    def smallest_fit(self, i: int, s: Strategy, lo: int, hi: int) -> int | None:
        """Smallest n in [lo, hi] with (s, n) fitting, by bisection (more n saves more)."""

        def opt(n: int) -> Option:
            return KEEP0 if n == 0 else (s, n)

        if hi < lo or not self.fits(i, opt(hi)):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fits(i, opt(mid)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def time(self) -> StepTime:
        if self._time is None:
            self._time = self.space.step_time(self.state)
        return self._time

    def switch_gain(self, i: int, new: Option) -> float:
        """Seconds saved by moving cluster ``i`` to ``new`` (simulated when offload is involved,
        unless a bound already shows there is nothing to gain)."""
        old = self.state[i]
        cs = self.space.clusters[i]
        rec_old = cs.rec_s(old)
        rec_new = cs.rec_s(new)
        if Strategy.OFFLOAD not in (old[0], new[0]):
            return rec_old - rec_new
        # Dropping r seconds of recompute shortens the step by at most r, adding copies never
        # shortens it, and the step is never shorter than its compute plus recompute.
        now = self.time()
        most = rec_old if new[0] == Strategy.OFFLOAD else now.offload_s
        if most - rec_new <= _TOL:
            return 0.0
        trial = list(self.state)
        trial[i] = new
        after = self.space.step_time(trial)
        self._trial = (i, new, after)
        return now.overhead_s - after.overhead_s

    def apply(self, i: int, new: Option) -> None:
        curve = self.curve
        for a, b, d in self.space.change_pieces(i, self.state[i], new):
            curve[a:b] = [x + d for x in curve[a:b]]
        self.state[i] = new
        known = self._trial is not None and self._trial[:2] == (i, new)
        self._time = self._trial[2] if known else None  # type: ignore[index]
        self._trial = None

    def order(self) -> list[int]:
        """Clusters by the predicted seconds per byte of their current option, dearest first."""
        sim = self.time()
        off_bytes = sum(
            c.nbytes
            for cs, (s, n) in zip(self.space.clusters, self.state)
            if s == Strategy.OFFLOAD
            for c in cs.cands[:n]
        )
        stall = sim.offload_s / off_bytes if off_bytes else 0.0

        def dearness(i: int) -> float:
            s, n = self.state[i]
            cs = self.space.clusters[i]
            nbytes = sum(c.nbytes for c in cs.cands[:n]) or 1
            if s == Strategy.OFFLOAD:
                return stall
            return cs.rec_s((s, n)) / nbytes

        return sorted(range(len(self.state)), key=lambda i: (-dearness(i), i))

    def cluster(self, i: int, switch: bool) -> bool:
        """Move cluster ``i`` to a cheaper option that fits (another strategy too if
        ``switch``); whether it moved."""
        s0, n0 = self.state[i]
        if s0 == Strategy.KEEP:
            return False
        fewer = self.smallest_fit(i, s0, 0, n0 - 1)
        if fewer is not None:  # fewer occurrences: never slower
            self.apply(i, KEEP0 if fewer == 0 else (s0, fewer))
            if fewer == 0:
                return True
        best: tuple[float, Option] | None = None
        limits = self.space.chain_limits(self.state, i) if switch else {}
        for s, m in limits.items():
            if s == s0 or not m:
                continue
            n = self.smallest_fit(i, s, 1, m)
            if n is not None:
                gain = self.switch_gain(i, (s, n))
                if gain > _TOL and (best is None or gain > best[0]):
                    best = (gain, (s, n))
        if best is not None:
            self.apply(i, best[1])
        return best is not None or fewer is not None


def tighten(space: Space, state: State, budget: int, passes: int = 3) -> State:
    """Move clusters to cheaper options while every position stays within ``budget``."""
    run = _Tightener(space, state, budget)
    for k in range(passes):
        moved = False
        for i in run.order():
            moved |= run.cluster(i, switch=k == 0)
        if not moved:
            break
    return run.state
