"""memopt.step_swap: the step plan keeps a coupled StateSwap only when its plan, the swap's
measured price added, beats the plan without it: on plain data and stand-ins, and the whole
loop with a model and a swap timed by stand-in CUDA events (last test)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from memopt.params.state_swap import StateSwap
from memopt.step_swap import SwapOffers, keep_swap
from tests.test_state_swap import WEIGHT, BrokenNet, _Ev, _step


def _choice(overhead_ms: float, feasible: bool = True, peak: int = 0):
    return SimpleNamespace(overhead_s=overhead_ms / 1e3, feasible=feasible, peak=peak)


def test_the_swap_stays_only_when_its_plan_and_price_cost_less_or_only_it_fits():
    # issue 14's 0.1 point (seventy-first session): 4.2 ms with it, 8.1 ms without
    assert keep_swap(_choice(4.2), _choice(8.1), 1.5e-3)
    assert not keep_swap(_choice(4.2), _choice(8.1), 4.0e-3)  # its price eats the saving
    assert not keep_swap(_choice(1.2), _choice(3.4), 2.2e-3)  # a tie goes to no swap
    assert not keep_swap(_choice(0.0), _choice(0.0), 0.0)  # nothing to recompute either way
    assert keep_swap(_choice(9.0), _choice(1.0, feasible=False), 5e-3)  # only it fits
    assert not keep_swap(_choice(1.0, feasible=False), _choice(9.0), 5e-3)  # only without fits
    # neither fits: the lower predicted peak
    assert keep_swap(_choice(1.0, False, peak=99), _choice(1.0, False, peak=100), 5e-3)
    assert not keep_swap(_choice(1.0, False, peak=100), _choice(0.0, False, peak=100), 0.0)


class _Swap:
    def __init__(self, price_s):
        self.price, self.moved_last, self.why = price_s, False, None
        self.stats = SimpleNamespace(declined=None)

    def open(self):
        return self.why is None

    def price_s(self):
        return self.price

    def decline(self, why):
        self.why = self.stats.declined = why


def _solver(by_offsets):
    calls = []

    def solve(offsets):
        calls.append(list(offsets))
        return by_offsets[tuple(offsets)]

    return solve, calls


def test_the_readings_kept_are_the_last_step_that_moved_nothing():
    swap, offers = _Swap(1e-3), SwapOffers()
    offers.add(swap)
    offers.saw_step(lambda: None)  # a step without readings keeps nothing
    assert offers.bare is None
    offers.saw_step(lambda: [5, 6])
    offers.saw_step(lambda: [7, 8])
    swap.moved_last = True
    offers.saw_step(lambda: [1, 2])  # the swap moved states: not a reading without it
    assert offers.bare == [7, 8]


def test_a_plan_without_the_swap_that_wins_declines_it_with_the_numbers_once():
    swap, offers, said = _Swap(2.5e-3), SwapOffers(), []
    offers.add(swap)
    offers.saw_step(lambda: [300, 300])
    with_it = _choice(1.21)
    solve, calls = _solver({(300, 300): _choice(3.43)})
    got = offers.choose(with_it, solve, lambda what, note: said.append((what, note)))
    assert got.overhead_s == 3.43 / 1e3 and calls == [[300, 300]]
    note = (
        "StateSwap declined by the step plan: without it the plan predicts 3.43 ms of "
        "overhead, with it 1.21 ms plus the swap's measured 2.50 ms a step; the optimizer's "
        "states stay on the device"
    )
    assert said == [("swap declined", note)] and swap.why == note
    # the swap sent at the start of the step the plan was made in: that step is not measured
    swap.moved_last = True
    assert offers.declined_moved()
    swap.moved_last = False  # the next step moves nothing
    assert not offers.declined_moved()
    # decided at the first step plan: a later one is left as it is
    assert offers.choose(with_it, solve, lambda *_: None) is with_it and len(calls) == 1


def test_a_swap_whose_plan_wins_is_kept_and_an_unpriced_one_is_not_weighed():
    swap, offers = _Swap(1.0e-3), SwapOffers()
    offers.add(swap)
    offers.saw_step(lambda: [300])
    solve, calls = _solver({(300,): _choice(8.1)})
    with_it = _choice(4.2)
    assert offers.choose(with_it, solve, lambda *_: None) is with_it and swap.why is None
    assert calls == [[300]]
    swap.moved_last = True  # a kept swap's moves are the plan's
    assert not offers.declined_moved()
    unpriced, offers = _Swap(None), SwapOffers()
    offers.add(unpriced)
    offers.saw_step(lambda: [300])
    assert offers.choose(with_it, solve, lambda *_: None) is with_it and len(calls) == 1
    assert unpriced.why is None


def test_a_dropped_or_closed_swap_is_not_weighed():
    offers = SwapOffers()
    offers.add(_Swap(1e-3))  # dropped at once: held weakly
    closed = _Swap(1e-3)
    closed.why = "closed"
    offers.add(closed)
    offers.saw_step(lambda: [1])
    solve, calls = _solver({})
    with_it = _choice(1.0)
    assert offers.bare is None
    assert offers.choose(with_it, solve, lambda *_: None) is with_it and calls == []


def test_the_ranks_decide_at_the_highest_price_and_only_when_every_rank_is_ready(monkeypatch):
    """agree_max stands in for the other rank: its price (3 ms) declines a swap this rank's
    (1 ms) would keep; a rank not ready keeps it everywhere."""
    import memopt.step_swap as step_swap

    other = {"unready": 0.0, "price": 3e-3}
    monkeypatch.setattr(
        step_swap.ranks,
        "agree_max",
        lambda values, dtype: [max(values[0], other["unready"]), max(values[1], other["price"])],
    )
    solve, _ = _solver({(300,): _choice(6.0)})
    for unready, kept in ((0.0, False), (1.0, True)):
        other["unready"] = unready
        swap, offers = _Swap(1e-3), SwapOffers()
        offers.add(swap)
        offers.saw_step(lambda: [300])
        with_it = _choice(4.2)
        got = offers.choose(with_it, solve, lambda *_: None)
        assert (got is with_it, swap.why is None) == (kept, kept)


@pytest.mark.parametrize("case", ["declined", "kept", "sized_to_nothing"])
def test_the_step_plan_prices_a_coupled_auto_swap_and_declines_it_when_it_buys_nothing(
    monkeypatch, case
):
    """Timed with stand-in CUDA events: steps 1-2 move nothing (30 ms each), steps 3-4 move
    every state (32.5 and 32 ms): the swap's price is 2 ms, and the plan waits for it
    (planned as step 5 begins). The step's readings are stood in for: the bytes outside the
    regions equal with the swap and without (it frees nothing the plan sees), so the plan
    without it costs as much, and the swap is declined: from step 6 nothing moves, each
    state has its own storage again and the report says why. When the plan without it cannot
    fit (the readings without the swap hold a gigabyte more), the swap is kept. Losses as
    torch.compile's throughout. A swap whose windows hide nothing (sized to 0 B) is priced on
    its two empty sends as any other and declined, without holding the plan back."""
    import types

    import memopt
    import memopt.params.rates as rates
    from memopt.api import _STATES
    from memopt.state import MemoptState

    rate = 0.0 if case == "sized_to_nothing" else 1e12
    monkeypatch.setattr(rates, "host_rates", lambda dev: types.SimpleNamespace(d2h_Bps=rate,
                                                                               h2d_Bps=rate))  # fmt: skip
    totals = iter([30.0, 30.0, 32.5, 32.0])  # ms from the send point to step()

    def mark(self, name):
        if name == "send":
            self._total, self._clock = next(totals), 0.0
        self._clock += {"send": 0.0, "reload": self._total / 2, "step": self._total / 2}[name]
        self._marks[name] = _Ev(self._clock)

    monkeypatch.setattr(StateSwap, "_mark", mark)
    monkeypatch.setattr(StateSwap, "_device", lambda self: torch.device("cpu"))
    extra = 1 << 30 if case == "kept" else 0
    swaps = []

    def offsets(self, sequence, ahead=False):
        return [0 if swaps[0].moved_last else extra] * len(sequence)

    monkeypatch.setattr(MemoptState, "_offsets", offsets)
    ref = BrokenNet()
    model = copy.deepcopy(ref)
    compiled = memopt.optimize(model, budget=0.5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swaps.append(StateSwap(opt, model=model, max_bytes="auto", min_bytes=WEIGHT))
    swap = swaps[0]
    ref_c = torch.compile(ref)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    state, planned, moved = _STATES[model], [], []
    for i in range(8):
        torch.testing.assert_close(_step(compiled, opt, i), _step(ref_c, opt_ref, i))
        planned.append(state._planned_for is not None)
        moved.append(swap.stats.tensors)
    assert planned == [False] * 5 + [True] * 3
    assert swap.stats.price_ms == pytest.approx(2.0) and swap._bare_s == pytest.approx(0.030)
    if case == "sized_to_nothing":
        assert moved == [0] * 8 and swap.max_bytes == 0 and state.waits.waited == 4
        assert swap.stats.declined.startswith("StateSwap declined by the step plan")
    elif case == "declined":
        assert moved == [0, 0, 0, 6, 6, 6, 0, 0]
        assert swap.stats.declined.startswith("StateSwap declined by the step plan: without it")
        assert "plus the swap's measured 2.00 ms a step" in swap.stats.declined
        assert state.notes == [swap.stats.declined]
        shared = {opt.state[p]["exp_avg"].untyped_storage().data_ptr() for p in opt.state}
        assert len(shared) == len(opt.state)  # each state has its own storage again
    else:
        assert moved == [0, 0, 0, 6, 6, 6, 6, 6] and swap.stats.declined is None
        assert not any("StateSwap" in n for n in state.notes)
