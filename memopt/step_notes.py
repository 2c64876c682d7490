"""What the training step tells the user once, as a warning and a note in the step report
(:attr:`memopt.report.StepInfo.notes`): each function here takes the step's facts as plain
values and returns the note's text, or None when there is nothing to say."""

from __future__ import annotations

from collections.abc import Sequence


def forwards_without_backward(runs: int, reached: int) -> str | None:
    """Half the step's runs or more had no backward: forwards run with grad mode on whose
    outputs were dropped (an evaluation outside ``torch.no_grad()``) join the training step,
    which is then planned with their saved tensors held."""
    missed = runs - reached
    if runs < 2 or 2 * missed < runs:
        return None
    return (
        f"{missed} of the step's {runs} compiled-region runs without a backward: forwards "
        "run with grad mode on whose outputs were dropped (an evaluation without "
        "torch.no_grad()?) count as part of the training step, and a budget plans for "
        "their saved tensors too; run them under torch.no_grad() or torch.inference_mode()"
    )


def last_plan_over_budget(plans: int, predicted: int, measured: int, budget: int) -> str | None:
    """With no step plan left (``plans`` made, the most allowed), the last plan measured over
    the byte budget: nothing corrects it, so the report says so. On an H200 (thirty-seventh
    session) Mistral's last plan at torch's 0.1 point was made at the fourth step plan and
    measured 7.03 GB, while the report still gave the first plan's 6.74 GB as measured."""
    if measured <= budget:
        return None
    return (
        f"the last step plan ({plans} of {plans} allowed), predicted at {predicted:,} bytes, "
        f"measured {measured:,}: {measured - budget:,} over the budget {budget:,}, with no "
        "step plan left to correct it"
    )


def went_back(plans: int, measured: int, budget: int, fit: int) -> str:
    """The last step plan (``plans`` made, the most allowed) measured over the byte budget,
    and the step went back to an earlier plan measured inside it, or, none inside, to the one
    measured lowest (memopt.step_fit)."""
    where = "inside it" if fit <= budget else f"{fit - budget:,} over it, the lowest measured"
    return (
        f"the last step plan ({plans} of {plans} allowed) measured {measured:,} bytes, "
        f"{measured - budget:,} over the budget {budget:,}: the step went back to an earlier "
        f"plan measured at {fit:,} bytes, {where}"
    )


def infeasible(budget: object, peak: int, target: int) -> str:
    """The step plan found no plan under its target: said as it is planned. A byte budget the
    smallest step peak still fits is not called infeasible: its target keeps a reserve (the
    blind CUDA reserve before any measurement, the allocator's run-to-run spread after), and
    on an H200 Gemma 2's step was called infeasible at a peak predicted and measured under
    the budget (forty-sixth session)."""
    if isinstance(budget, int) and peak <= budget:
        return (
            f"budget {budget} leaves no room for its reserve in this step: the smallest "
            f"predicted step peak is {peak} bytes, {budget - peak} under the budget but over "
            f"its target {target} (using that plan)"
        )
    return (
        f"budget {budget} is infeasible for this step; the smallest predicted step peak is "
        f"{peak} bytes (using that plan)"
    )


def fit_word(budget: object, peak: int, feasible: bool | None) -> str:
    """The step plan's verdict in the step report: ``fits``, ``INFEASIBLE, smallest found``,
    or, for a byte budget the smallest peak fits without its reserve, ``over the target,
    under the budget: smallest found``."""
    if feasible:
        return "fits"
    if isinstance(budget, int) and peak <= budget:
        return "over the target, under the budget: smallest found"
    return "INFEASIBLE, smallest found"


def describe_choice(choice, sequence: Sequence[int], regions: int, changed: list) -> str:
    """The log line of a step plan: its runs, the runs whose plan changed, the predicted peak
    and where, and each region's option."""
    per_region = sorted({sequence[p]: o for p, o in choice.chosen.items()}.items())
    return (
        f"{len(sequence)} run(s) of {regions} region(s); runs with a new plan: "
        f"{changed or 'none'}; predicted peak {choice.peak} at run {choice.peak_at} (target "
        f"{choice.target}); per region: "
        + "; ".join(f"{r}: {o.label} (peak {o.peak}, saved {o.saved})" for r, o in per_region)
    )
