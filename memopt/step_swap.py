"""Whether the step plan keeps a coupled ``StateSwap``: the plan with it against the plan
without it, the swap's own time counted.

A ``StateSwap(opt, model=m, max_bytes="auto")`` on a model memopt plans under a budget
(``memopt.step_waits``) frees the optimizer's states through the forward and the backward's
first layers, so the step plan made after it recomputes less. The swap is not free: its copies
and hooks cost time (on issue 14's FSDP2 step the swap alone ran 1-4 ms over torch.compile's
73 ms, H100, docs/benchmarks.md, seventy-first session), and where the budget needs little
recompute it saves less than it costs (torch 0.5's point there: the plan with it predicted
1.2 ms, without it 3.4 ms, and the measured steps were the same).

So the swap is an option of the step plan, priced by measurement:

* the swap times its first steps twice: two without moves (they size ``"auto"``) and two
  moving what it sized; its price is the shortest step with moves minus the shortest without
  (CUDA events from its send point to ``step()``, after the copies back were waited for);
* memopt keeps the allocator's readings of the last step the swap moved nothing in (the
  bytes outside the regions, ``MemoptState._offsets``), beside those of the step with it;
* the first step plan after the swap is priced is solved on both; the swap stays when its plan
  fits and costs less, its price included, than the plan without it, or only its plan fits
  (neither fitting: when its predicted peak is the lower); else the swap is declined
  (``StateSwap.decline``: nothing moves from the next step on) and the plan without it is
  the step's. Said once in the step report's notes. Where the swap's send comes before the
  plan in the step the plan is made in, that step still moves states: its peak is not taken
  as the plan's, the next step's is. At world size > 1 the ranks decide
  alike: at the highest rank's price, and only when every rank has both readings.

The plans' costs are the planner's prices and the swap's is measured: where the planner's
prices over-state (docs/zoo.md, BART) the swap is kept a little more often than it should be.
A swap with a fixed ``max_bytes`` (or on a CPU) has no step without moves to price it against:
it is kept, as the user set it.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from memopt import ranks

log = logging.getLogger("memopt")
FLOAT = torch.float64


def keep_swap(with_swap: Any, without: Any, price_s: float) -> bool:
    """Whether the step plan ``with_swap`` (a ``StepChoice``: ``feasible``, ``overhead_s``,
    ``peak``), the swap's ``price_s`` added, beats ``without``: it fits and costs less, or
    only it fits. Neither fitting: whether its predicted peak is the lower."""
    if not without.feasible:
        return bool(with_swap.feasible) or with_swap.peak < without.peak
    return bool(with_swap.feasible) and with_swap.overhead_s + price_s < without.overhead_s


class SwapOffers:
    """The coupled swaps of one optimized model (held weakly) and the readings of the last
    step they moved nothing in."""

    def __init__(self) -> None:
        self._swaps: list[weakref.ref] = []
        self.bare: list[int] | None = None  # bytes outside the regions per run, no swap moving
        self.decided = False

    def add(self, swap: Any) -> None:
        self._swaps.append(weakref.ref(swap))

    def _live(self) -> list[Any]:
        return [s for ref in self._swaps if (s := ref()) is not None and s.open()]

    def declined_moved(self) -> bool:
        """Whether a swap declined by the step plan still moved states in the step just done
        (its send came before the plan, at the step's start): that step's peak is not the
        plan's, and the next step is measured instead."""
        swaps = [s for r in self._swaps if (s := r()) is not None]
        return any(s.moved_last and s.stats.declined is not None for s in swaps)

    def saw_step(self, offsets: Callable[[], list[int] | None]) -> None:
        """A step ran before the step plan (it waits for the swaps): its readings are kept
        when no swap moved anything in it and they are known (``offsets()``)."""
        live = self._live()
        if live and not any(s.moved_last for s in live):
            got = offsets()
            self.bare = got if got is not None else self.bare

    def choose(
        self,
        choice: Any,
        solve: Callable[[Sequence[int]], Any],
        say: Callable[[str, str | None], None],
    ) -> Any:
        """The step plan ``choice`` (made with the swaps moving) or the plan ``solve`` makes on
        the readings without them when that one wins (:func:`keep_swap`; the swaps are then
        declined). Decided at the first step plan: a swap not priced by then (its wait ran
        out, or no CUDA events timed it) is kept."""
        if self.decided or not self._swaps:  # at the first step plan only (later ones correct
            return choice  # what it measured); no collective without a coupled swap
        self.decided, live = True, self._live()
        prices = [s.price_s() for s in live]
        ok = bool(live) and self.bare is not None and all(p is not None for p in prices)
        # every rank decides as the others: on every rank's readiness, at the highest price
        unready, price = ranks.agree_max([float(not ok), sum(prices) if ok else 0.0], FLOAT)
        if unready:
            return choice
        without = solve(self.bare)
        if keep_swap(choice, without, price):
            log.info("memopt step plan: StateSwap kept: the plan with it predicts %.2f ms plus "
                     "its measured %.2f ms, without it %.2f ms%s", 1e3 * choice.overhead_s,
                     1e3 * price, 1e3 * without.overhead_s,
                     "" if without.feasible else " (over the target)")  # fmt: skip
            return choice
        why = (
            f"StateSwap declined by the step plan: without it the plan predicts "
            f"{1e3 * without.overhead_s:.2f} ms of overhead, with it "
            f"{1e3 * choice.overhead_s:.2f} ms plus the swap's measured "
            f"{1e3 * price:.2f} ms a step"
            + ("" if choice.feasible else " and over the target")
            + "; the optimizer's states stay on the device"
        )
        for s in live:
            s.decline(why)
        say("swap declined", why)
        return without
