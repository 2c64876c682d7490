"""memopt.step_waits: a step plan waits for what settles the memory outside the regions (a
StateSwap sizing itself), at most WAIT_STEPS steps, and says so when the wait runs out."""

from __future__ import annotations

import gc

from memopt.step_waits import WAIT_STEPS, Waits


class Owner:
    def __init__(self) -> None:
        self.done = False

    def ready(self) -> bool:
        return self.done


def test_waits_until_ready_and_never_past_its_limit():
    said = []
    waits, owner = Waits(), Owner()
    waits.add(owner.ready, "StateSwap")
    assert [waits.pending(lambda *a: said.append(a)) for _ in range(2)] == [True, True]
    owner.done = True
    assert not waits.pending(lambda *a: said.append(a)) and said == [] and waits.waited == 2

    stuck, never = Waits(), Owner()
    stuck.add(never.ready, "StateSwap")
    got = [stuck.pending(lambda *a: said.append(a)) for _ in range(WAIT_STEPS + 2)]
    assert got == [True] * WAIT_STEPS + [False, False] and stuck.waited == WAIT_STEPS
    assert len(said) == 2 and all(what == "waits" for what, _ in said)
    assert f"waited {WAIT_STEPS} steps for StateSwap to settle" in said[0][1]


def test_a_dropped_owner_waits_for_nothing():
    waits, owner = Waits(), Owner()
    waits.add(owner.ready, "StateSwap")
    del owner
    gc.collect()
    assert not waits.pending(lambda *a: None) and waits.waited == 0
