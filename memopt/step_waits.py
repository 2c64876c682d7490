"""Memory outside the regions that is still settling when a step is first seen: the step plan
waits for it (a few steps at most), so it is made from readings that hold.

``memopt.params.StateSwap(opt, model=m, max_bytes="auto")`` on a model planned under a budget
times two steps, sizes itself, then sends that share of the optimizer's states away at each
forward. A step plan made before then reads the states as held through the head's backward
and recomputes for bytes the swap frees later; the swap, still sizing from windows the plan
keeps changing, and the planner correcting for a peak the swap keeps changing, adapted to each
other: on the H100 (seventieth session, docs/benchmarks.md) the two together ran slower than
the budget alone and once ended over the budget. Now the swap fixes its size once (it no
longer re-sizes while memopt plans the model) and the step plan waits until a step has run
with it."""

from __future__ import annotations

import weakref
from collections.abc import Callable

#: Steps a new step's plan waits at most (a swap needs its timed steps and one step sending).
WAIT_STEPS = 6


class Waits:
    """Readiness checks of what settles the memory outside the regions (``add``); ``pending``
    is asked when a new step would be planned."""

    def __init__(self) -> None:
        self._checks: list[tuple[Callable[[], Callable[[], bool] | None], str]] = []
        self.waited = 0  # steps a plan waited

    def add(self, ready: Callable[[], bool], what: str) -> None:
        """``ready``: a bound method (held weakly: a closed or dropped owner waits for
        nothing); ``what`` names it in the note when the wait runs out."""
        self._checks.append((weakref.WeakMethod(ready), what))

    def pending(self, say: Callable[[str, str | None], None]) -> bool:
        """Whether the step plan waits one more step; after ``WAIT_STEPS`` it no longer
        does, and ``say`` tells the user why the plan did not wait."""
        self._checks = [(ref, what) for ref, what in self._checks if ref() is not None]
        left = [what for ref, what in self._checks if (ready := ref()) is not None and not ready()]
        if not left:
            return False
        if self.waited >= WAIT_STEPS:
            names = ", ".join(left)
            say("waits", f"the step plan waited {WAIT_STEPS} steps for {names} to settle and "
                "is made without it; the plan then corrects for what it frees as it measures")  # fmt: skip
            return False
        self.waited += 1
        return True
