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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: Held-byte buckets per run (the program's size: runs x MAX_STATES x options).
MAX_STATES = 4096


def exact_runs(
    sequence: Sequence[int],
    fronts: Mapping[int, Sequence],
    target: int,
    offsets: Sequence[int] | None = None,
) -> dict[int, object] | None:
    """Per run position, the option (of its region's ``fronts``) of the least total overhead
    whose step peak fits ``target``; None when nothing fits."""
    if target <= 0:
        return None
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


def _frontier(states: dict[int, tuple]) -> dict[int, tuple]:
    """Drop every pair another pair beats: held no more and overhead no more."""
    out, best = {}, math.inf
    for key in sorted(states):
        s = states[key]
        if s[0] < best:
            out[key], best = s, s[0]
    return out
