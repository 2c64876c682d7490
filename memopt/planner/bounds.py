"""Proven lower bounds: on the overhead of any plan within the budget, and on the peak.

Keep only one position ``t`` of the memory constraint and relax the choice per cluster to a
convex combination of options: what is left is the LP of a multiple-choice knapsack, solved
exactly by walking the clusters' lower cost/savings hulls cheapest slope first. Every plan that
fits the budget also fits at ``t``, so the LP value bounds its overhead from below.

Costs in the LP must not exceed a plan's real overhead. Recompute seconds are exact. For offload,
the copies of layer ``l`` must run inside its window ``W_l`` (production to release; reload
issue to the last first use), so the stalls inside ``W_l`` are at least
``bytes_l / rate - compute(W_l)``; a stall lies in at most ``K`` windows, so the total stall is
at least ``1/K`` of the sum over layers. ``max(0, x - W)`` is superadditive, so each cluster can
be charged its own share, which keeps the LP separable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memopt.plan import Strategy
from memopt.planner.space import ClusterSpace, Space
from memopt.planner.timing import recompute_s


@dataclass(frozen=True)
class Bounds:
    overhead_s: float
    """No plan within the budget has a smaller overhead (``inf``: no plan fits)."""
    peak: int
    """No plan has a smaller peak."""


def _cover_counts(
    spans: Iterable[tuple[int, int]], points: Iterable[int], n_positions: int
) -> dict[int, int]:
    """How many inclusive spans ``(a, b)`` cover each point (one sweep, not spans x points)."""
    diff = [0] * (n_positions + 2)
    for a, b in spans:
        if a <= b:
            diff[max(a, 0)] += 1
            diff[min(b, n_positions) + 1] -= 1
    run = 0
    for i in range(len(diff)):
        run += diff[i]
        diff[i] = run
    return {x: diff[x] for x in points}


class _OffloadFloor:
    """Per-layer windows and overlap counts for the offload part of the bound."""

    def __init__(self, space: Space) -> None:
        tl = space.problem.timeline
        start, F = tl.start_s, tl.n_fwd
        self.rates = space.rates
        rec = [0.0] * (tl.n_positions + 1)
        for cs in space.clusters:
            for c, rc in zip(cs.cands, cs.rcost):
                rec[F + c.first_bwd_use_pos + 1] += max(rc.values(), default=0.0)
        for name, s in space.fixed_decisions.items():
            c = space.problem.by_name[name]
            rec[F + c.first_bwd_use_pos + 1] += recompute_s(c, s, space.rates)
        for i in range(1, len(rec)):
            rec[i] += rec[i - 1]  # rec[i]: max recompute seconds before position i
        lo: dict[int, int] = {}
        hi: dict[int, int] = {}
        for c in space.problem.candidates:
            if c.layer in space.windows and c.offloadable:
                lo[c.layer] = min(lo.get(c.layer, c.produce_pos), c.produce_pos)
                u = F + c.first_bwd_use_pos
                hi[c.layer] = max(hi.get(c.layer, u), u)
        fwin, bwin = {}, {}
        for layer in lo:
            w = space.windows[layer]
            fwin[layer] = (lo[layer] + 1, w.release_pos)
            bwin[layer] = (w.reload_pos, hi[layer])
        self.wf = {
            k: max(0.0, start[b] - start[a] + rec[b + 1] - rec[a]) for k, (a, b) in fwin.items()
        }
        self.wb = {
            k: max(0.0, start[b] - start[a] + rec[b + 1] - rec[a]) for k, (a, b) in bwin.items()
        }
        points = {b for a, b in fwin.values()} | {
            F + c.first_bwd_use_pos for c in space.problem.candidates if c.layer in bwin
        }
        cf = _cover_counts(fwin.values(), points, tl.n_positions)
        cb = _cover_counts(bwin.values(), points, tl.n_positions)
        if any(cf[x] and cb[x] for x in points):
            self.kf = self.kb = max((cf[x] + cb[x] for x in points), default=1)
        else:
            self.kf = max(cf.values(), default=1) or 1
            self.kb = max(cb.values(), default=1) or 1

    def layer(self, layer: int, nbytes: int) -> float:
        """Stall floor for ``nbytes`` of ``layer`` offloaded (0 for no bytes)."""
        if not nbytes:
            return 0.0
        r = self.rates
        return (
            max(0.0, nbytes / r.d2h_bytes_per_s - self.wf[layer]) / self.kf
            + max(0.0, nbytes / r.h2d_bytes_per_s - self.wb[layer]) / self.kb
        )

    def cost(self, per_layer: dict[int, int]) -> float:
        return sum(self.layer(k, v) for k, v in per_layer.items())


def _option_floors(cs: ClusterSpace, floor: _OffloadFloor) -> dict[Strategy, list[float]]:
    out = {}
    for s, m in cs.maxn.items():
        if not m:
            continue
        if s != Strategy.OFFLOAD:
            out[s] = cs.rprefix[s]
            continue
        acc = [0.0]
        per: dict[int, int] = {}
        for i in range(m):
            lay: int = cs.cands[i].layer  # type: ignore[assignment]
            before = per.get(lay, 0)
            per[lay] = before + cs.cands[i].nbytes
            acc.append(acc[-1] + floor.layer(lay, per[lay]) - floor.layer(lay, before))
        out[s] = acc
    return out


def _hull(points: list[tuple[int, float]]) -> tuple[tuple[int, float], list[tuple[int, float]]]:
    """Cheapest point and the (savings, cost) steps of the lower hull to its right."""
    start = min(points, key=lambda p: (p[1], -p[0]))
    right: dict[int, float] = {}
    for x, y in points:
        if x > start[0] and (x not in right or y < right[x]):
            right[x] = y
    chain = [start]
    for x in sorted(right):
        p = (x, right[x])
        while len(chain) >= 2:
            (ox, oy), (ax, ay) = chain[-2], chain[-1]
            if (ax - ox) * (p[1] - oy) - (ay - oy) * (p[0] - ox) <= 0:
                chain.pop()
            else:
                break
        chain.append(p)
    return start, [(b[0] - a[0], b[1] - a[1]) for a, b in zip(chain, chain[1:])]


def cluster_floors(space: Space) -> list[dict[Strategy, list[float]]]:
    """Per cluster of ``space`` and strategy, a floor on the seconds of each option ``(s, n)``
    (recompute exactly, offload its share of the stall floor)."""
    floor = _OffloadFloor(space)
    return [_option_floors(cs, floor) for cs in space.clusters]


def option_hull(sv, fl) -> tuple[tuple[int, float], list[tuple[int, float]]]:
    """One cluster's options as (savings, cost) points (``sv[s][n]`` bytes, ``fl[s][n]``
    seconds): its cheapest point and the steps of its lower hull (:func:`_hull`)."""
    pts = [(0, 0.0)] + [(a[n], fl[s][n]) for s, a in sv.items() for n in range(1, len(a))]
    return _hull(pts)


def relaxed_cost(saves, floors, need: int, const: float, extra=()) -> float:
    """Cheapest convex combination of options saving ``need`` bytes, plus ``const`` (``inf``
    when all of them save less). ``extra``: more clusters as ``(copies, hull)`` pairs of
    :func:`option_hull` (a region's clusters in each of its earlier runs, memopt.step_bounds)."""
    total, steps = const, []
    hulls = [(1, option_hull(sv, fl)) for sv, fl in zip(saves, floors)]
    for m, ((x0, y0), segs) in [*hulls, *extra]:
        need -= m * x0
        total += m * y0
        steps += [(m * dx, m * dy) for dx, dy in segs]
    steps.sort(key=lambda d: d[1] / d[0])
    for dx, dy in steps:
        if need <= 0:
            break
        total += min(1.0, need / dx) * dy
        need -= dx
    return total if need <= 0 else float("inf")


def most_saved(space: Space) -> list[int]:
    """Per position ``t``, at least the most bytes any plan saves at ``t``: per cluster, the
    largest over strategies of what its candidates save there, each counted only where it
    saves (so it also holds for plans that keep some occurrences inside a prefix, as decide
    does for recompute chains). ``space.base[t] - most_saved(space)[t]`` is a floor on the
    memory at ``t``, and its maximum over ``t`` a floor on every plan's peak."""
    n = len(space.base)
    diff = [0] * (n + 1)
    for cs in space.clusters:
        events: dict[int, list[tuple[Strategy, int, int]]] = {}
        for s, m in cs.maxn.items():
            for k in range(m):
                for a, b, d in cs.saves[k][s]:
                    events.setdefault(a, []).append((s, k, d))
                    events.setdefault(b, []).append((s, k, -d))
        vals = {s: [0] * m for s, m in cs.maxn.items() if m}
        pos = dict.fromkeys(vals, 0)  # per strategy: the sum of the positive savings
        xs = sorted(events)
        for x, end in zip(xs, xs[1:]):
            for s, k, d in events[x]:
                old = vals[s][k]
                vals[s][k] = new = old + d
                pos[s] += max(new, 0) - max(old, 0)
            best = max(pos.values(), default=0)
            if best > 0:
                diff[x] += best
                diff[min(end, n)] -= best
    out, run = [], 0
    for d in diff[:n]:
        run += d
        out.append(run)
    return out


def peak_floor(space: Space) -> tuple[int, int]:
    """``(bytes, position)``: no state of ``space`` peaks below ``bytes``; the memory at
    ``position`` cannot go lower."""
    floor = [b - m for b, m in zip(space.base, most_saved(space))]
    peak = max(floor)
    return peak, floor.index(peak)


def compute_bounds(space: Space, budget: int, points: Sequence[int]) -> Bounds:
    """Bounds for ``space`` from the constraint at each of ``points`` (the best one wins)."""
    floor = _OffloadFloor(space)
    floors = [_option_floors(cs, floor) for cs in space.clusters]
    fixed_s = space.step_time([(Strategy.KEEP, 0)] * len(space.clusters)).recompute_s
    fixed_off: dict[int, int] = {}
    for name, s in space.fixed_decisions.items():
        if s == Strategy.OFFLOAD:
            c = space.problem.by_name[name]
            fixed_off[c.layer] = fixed_off.get(c.layer, 0) + c.nbytes  # type: ignore[index]
    const = fixed_s + floor.cost(fixed_off)
    best_s, best_peak = const, 0
    for t in points:
        need = space.base[t] - budget
        saves = [space.saves_at(i, t) for i in range(len(space.clusters))]
        most = sum(max((max(a) for a in sv.values()), default=0) for sv in saves)
        best_peak = max(best_peak, space.base[t] - most)
        if need <= 0:
            continue
        if most < need:
            return Bounds(float("inf"), best_peak)
        best_s = max(best_s, relaxed_cost(saves, floors, need, const))
    return Bounds(best_s, best_peak)
