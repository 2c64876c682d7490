"""One step plan from plain data: the least-overhead choice over the regions' menus
(:func:`memopt.step.choose_with_offload`), again on finer menus around it
(:func:`memopt.step.finer_menus`), with its proven floor (:func:`memopt.step_bounds.with_floor`).
``MemoptState.plan_step`` solves once, or twice when a coupled ``StateSwap`` is priced against
the step without it (:mod:`memopt.step_swap`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memopt.step import Option, StepChoice, choose_with_offload, finer_menus
from memopt.step_bounds import with_floor


def solve_step(
    sequence: Sequence[int],
    menus: Mapping[int, Sequence[Option]],
    target: int,
    layers: Sequence[Sequence[int]],
    timing: Any,
    away: Mapping[int, frozenset[int]] | None,
    problems: Mapping[int, Any],
    solve_at: Any,
    offsets: Sequence[int] | None,
) -> StepChoice:
    """The step's plan at ``offsets`` (bytes outside the regions per run). ``problems``: each
    region's planning problem; ``solve_at(region, budget)``: its exact option at a budget."""
    choice = choose_with_offload(sequence, menus, target, offsets, layers, timing, away)
    finer = finer_menus(sequence, menus, choice, solve_at)
    if finer is not None:  # the options run, with restarts and the room left under the target
        again = choose_with_offload(sequence, finer, target, offsets, layers, timing, away)
        choice = again if again.feasible and again.overhead_s < choice.overhead_s else choice
    # a lower bound: on the problems without the placed excesses (each holds for some plans)
    return with_floor(choice, sequence, problems, target, offsets, away)
