"""The least-overhead step plan over the regions' menus, exactly, one option per run.

Plain data (memopt.step's ``Option``). The step model (memopt.step) is a chain: run ``i``
fits when ``held(i) + peak(i) + offset(i) <= target``, and leaves ``saved(i)`` held for every
later run. So the runs are decided in order, and after each run only two numbers matter for
what comes next: the bytes held and the overhead spent. A dynamic program keeps, after each
run, every (held, overhead) pair that no other pair beats on both; the cheapest pair left at
the end is the optimum. The greedy descent of :func:`memopt.step.choose` can stop above it (the
FSDP2 Llama's first step plan on an H200: 1.160 ms where 1.067 ms fitted,
``docs/data/step_choice_s29.json``).

Pairs are kept per bucket of ``target / MAX_STATES`` held bytes, the cheapest of a bucket
(at most MAX_STATES pairs per run, whatever the number of runs and options): every fit is
checked on the exact bytes, so the answer always fits, and it is the optimum up to one bucket
of held bytes per run (2 MiB of a 9 GiB target).

With runs offloaded across the step (``away``: per run, the offloaded runs whose saved tensors
are on the host meanwhile), a run's bytes depend on the options of the offloaded runs too. Those
are few (the first layers): every combination of their options is fixed in turn and the program
runs over the rest, their moved bytes taken off the runs they are away from. Beyond
:data:`MAX_AWAY_COMBINATIONS` combinations, the offloaded runs of one region take the same option.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

#: Held-byte buckets per run (the program's size: runs x MAX_STATES x options).
MAX_STATES = 4096
#: The most combinations of the offloaded runs' options the exact choice tries one by one.
MAX_AWAY_COMBINATIONS = 64
#: The most sets of options (at most ``limit`` per region) :func:`exact_limited` solves over.
MAX_LIMITED_SETS = 64


def exact_runs(
    sequence: Sequence[int],
    fronts: Mapping[int, Sequence],
    target: int,
    offsets: Sequence[int] | None = None,
    away: Mapping[int, frozenset[int]] | None = None,
) -> dict[int, object] | None:
    """Per run position, the option (of its region's ``fronts``) of the least total overhead
    whose step peak fits ``target``; None when nothing fits. ``away``: as
    :func:`memopt.step.step_terms` (then each offloaded run's option is one of a combination
    tried in turn, the module's docstring)."""
    if target <= 0:
        return None
    if away:
        return _exact_away(sequence, fronts, target, offsets, away)
    bucket = max(1, math.ceil(target / MAX_STATES))
    # per bucket of held bytes: (overhead, held, the choices so far as a linked pair)
    states: dict[int, tuple[float, int, tuple | None]] = {0: (0.0, 0, None)}
    for i, r in enumerate(sequence):
        off = offsets[i] if offsets else 0
        new: dict[int, tuple[float, int, tuple | None]] = {}
        for cost, held, path in states.values():
            for o in fronts[r]:
                if held + o.peak + off > target:
                    continue
                h = held + o.saved
                key = -(-h // bucket)
                c = cost + o.overhead_s
                old = new.get(key)
                if old is None or (c, h) < (old[0], old[1]):
                    new[key] = (c, h, (o, path))
        if not new:
            return None
        states = _frontier(new)
    cost, held, path = min(states.values(), key=lambda s: (s[0], s[1]))
    picked = []
    while path is not None:
        o, path = path
        picked.append(o)
    return dict(enumerate(reversed(picked)))


def exact_limited(
    sequence: Sequence[int],
    fronts: Mapping[int, Sequence],
    target: int,
    offsets: Sequence[int] | None,
    away: Mapping[int, frozenset[int]] | None,
    exact: Mapping[int, object],
    limit: int,
) -> list[dict[int, object]]:
    """Answers of :func:`exact_runs` that use at most ``limit`` options per region (each is a
    compile): for each region whose runs in ``exact`` (the unlimited optimum) use more, every
    ``limit`` of those options and of the region's most aggressive one (the fewest saved
    bytes) is tried, the program run over the runs with only those (at most
    :data:`MAX_LIMITED_SETS` sets in all)."""
    over = {}
    for r in sorted(set(sequence)):
        used = list({id(exact[i]): exact[i] for i, x in enumerate(sequence) if x == r}.values())
        if len(used) > limit:
            hardest = min(fronts[r], key=lambda o: (o.saved, o.peak, -o.overhead_s))
            pool = used + [hardest] * all(o is not hardest for o in used)
            over[r] = list(itertools.combinations(pool, limit))
    out = []
    for sets in itertools.islice(itertools.product(*over.values()), MAX_LIMITED_SETS):
        allowed = dict(zip(over, sets))
        runs = {i: allowed.get(r, fronts[r]) for i, r in enumerate(sequence)}
        got = exact_runs(range(len(sequence)), runs, target, offsets, away)
        if got is not None:
            out.append(got)
    return out


def _exact_away(sequence, fronts, target, offsets, away) -> dict[int, object] | None:
    n = len(sequence)
    gone = sorted({j for runs in away.values() for j in runs})
    combos = _away_combinations([sequence[j] for j in gone], fronts)
    best, best_cost = None, math.inf
    for combo in combos:
        fixed = dict(zip(gone, combo))
        offs = [
            (offsets[i] if offsets else 0) - sum(fixed[j].movable for j in away.get(i, ()))
            for i in range(n)
        ]
        runs = {i: [fixed[i]] if i in fixed else fronts[r] for i, r in enumerate(sequence)}
        got = exact_runs(range(n), runs, target, offs)
        if got is not None:
            cost = sum(o.overhead_s for o in got.values())
            if cost < best_cost:
                best, best_cost = got, cost
    return best


def _away_combinations(regions: Sequence[int], fronts: Mapping[int, Sequence]) -> list[tuple]:
    """Options for the offloaded runs (of ``regions``, in order): every combination, or where
    there are more than :data:`MAX_AWAY_COMBINATIONS`, one option per region for all its runs."""
    if math.prod(len(fronts[r]) for r in regions) <= MAX_AWAY_COMBINATIONS:
        return list(itertools.product(*(fronts[r] for r in regions)))
    distinct = sorted(set(regions))
    out = []
    for per in itertools.product(*(fronts[r] for r in distinct)):
        pick = dict(zip(distinct, per))
        out.append(tuple(pick[r] for r in regions))
        if len(out) >= MAX_AWAY_COMBINATIONS:
            break
    return out


def _frontier(states: dict[int, tuple]) -> dict[int, tuple]:
    """Drop every pair another pair beats: held no more and overhead no more."""
    out, best = {}, math.inf
    for key in sorted(states):
        s = states[key]
        if s[0] < best:
            out[key], best = s, s[0]
    return out
