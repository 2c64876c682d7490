"""The step plan measured within a byte budget, kept to go back to.

Each step plan is measured once (memopt.peak_probe). A plan measured inside the budget may
still be replaced: by a relaxed plan that spends the room it left, or by a plan made after
Inductor compiled a variant above the model. Those later plans can overrun the budget after the
last allowed step plan. On an H200 (thirty-eighth session), Mistral at torch's 0.1 point
measured 6.53 GB on its first plan, under the 6.70 GB budget. Relaxed and then corrected twice
for Inductor's buffer plans, it ended at 7.08 GB with no step plan left.

With every step plan spent, the last one measured over the budget, and an earlier plan
measured inside it, the step goes back to that plan. Its compiled variants are still held, so
nothing compiles again. Where several fitted, the one with the least predicted overhead is
kept. Where none fitted, the step goes back to the plan measured lowest, if that is not the
last: a measured peak is known, a re-plan's is a prediction. On an H200 (forty-third session)
Mistral at torch's 0.1 point measured 6,735,854,080 bytes on its first plan, 0.55% over the
6,699,150,848-byte budget; its three step plans each added offload, which the peak model
under-counts, and the last measured 6,842,839,552 (2.14% over).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memopt import step_notes


@dataclass(frozen=True)
class FitPlan:
    """A step plan as it ran when its measurement came in."""

    measured: int
    overhead_s: float
    choice: Any  # memopt.step.StepChoice, or None: the regions' own plans
    run_plan: dict[int, Any]
    sequence: tuple[int, ...]
    offload: Any  # the step's StepOffload then (identity: the same object or no fallback)


def keep(state: Any, kept: FitPlan | None) -> FitPlan | None:
    """``kept``, or the plan the step just done ran on when the probe measured it better:
    inside the byte budget at a lower predicted overhead (at an equal one, a lower peak), or,
    while no plan has measured inside, at a lower peak."""
    measured, budget = state._probed, state.config.budget
    if measured is None or not isinstance(budget, int):
        return kept
    if state.last_step != state._planned_for:
        return kept
    c = state.step_choice
    if c is not None:
        overhead = c.overhead_s
    else:  # each run's own plan
        planners = [state.regions[i].extra.get("planner") or {} for i in state.last_step]
        overhead = sum(p.get("predicted_overhead_s") or 0.0 for p in planners)
    new = FitPlan(measured, overhead, c, dict(state.run_plan), state.last_step, state.offload)
    if kept is not None and kept.sequence == new.sequence:
        if _rank(kept, budget) <= _rank(new, budget):
            return kept
    return new


def _rank(plan: FitPlan, budget: int) -> tuple[bool, float, int]:
    """Lower is better: inside the budget first, by predicted overhead; then by peak."""
    over = plan.measured > budget
    return over, (plan.measured if over else plan.overhead_s), plan.measured


#: Step plans allowed beyond memopt.state.MAX_STEP_PLANS, each only to correct a last plan
#: measured over the byte budget when no plan was measured inside it: a budget is a peak not to
#: pass, a recompile costs once. On an H200 (forty-sixth session) Mistral's fourth plan at
#: torch's 0.1 point measured 9.5 MB (0.14%) over, its first 0.55% over, none inside.
OVERRUN_FIXES = 1


def last_plan(state: Any, kept: FitPlan | None) -> str:
    """No step plan left: the last plan's measurement still reaches the report. Over the
    byte budget with no plan of this step measured inside it (``kept`` is the best measured),
    while a correction is left (``state._fixes_left``): ``"fix"``, the caller plans the step
    once more with the measured overrun as its correction. Else the step goes back to
    ``kept`` where that is another plan of this step with the same offload, measured lower
    (``"back"``), or the overrun is said (``""``)."""
    measured = state._probed if state._probed is not None else state._record
    c, budget = state.step_choice, state.config.budget
    if measured is None or state.last_step != state._planned_for:
        return ""
    state.measured_peak = measured
    if c is None or not isinstance(budget, int) or measured <= budget:
        return ""
    plans = state._step_plans
    other = (
        kept is not None
        and kept.sequence == state.last_step
        and kept.choice is not c
        and kept.offload is state.offload
    )
    if (kept is None or kept.measured > budget) and state._fixes_left > 0:
        return "fix"  # no plan of this step measured inside the budget
    if other and kept.measured < measured:
        state.step_choice, state.run_plan = kept.choice, dict(kept.run_plan)
        state.measured_peak, state.went_back_from = kept.measured, measured
        state._probe_next = True  # measured once more: the report gives what it holds now
        state._say("went back", step_notes.went_back(plans, measured, budget, kept.measured))
        return "back"
    state._say("last plan", step_notes.last_plan_over_budget(plans, c.peak, measured, budget))
    return ""
