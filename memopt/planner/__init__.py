"""Budget planner: pick keep / recompute / compromise / offload per cluster so that the
predicted peak fits a budget at the smallest predicted step time. Plain data in, plain data
out; no FX here (see docs/planner.md).

Modules: :mod:`~memopt.planner.problem` (inputs), :mod:`~memopt.planner.costs` (device rates,
roofline, calibration), :mod:`~memopt.planner.memory` (liveness and peak),
:mod:`~memopt.planner.timing` (step-time simulation), :mod:`~memopt.planner.space`,
:mod:`~memopt.planner.greedy`, :mod:`~memopt.planner.bounds`, :mod:`~memopt.planner.chains`
(the recompute-chain rule), :mod:`~memopt.planner.solver` (the search),
:mod:`~memopt.planner.emit` (plan strings and sync dict), :mod:`~memopt.planner.progress`
(messages for a progress display) and :mod:`~memopt.planner.synthetic` (layer stacks for tests
and benchmarks).
"""

from __future__ import annotations

from memopt.planner.chains import MAX_RECOMPUTE_DEPTH
from memopt.planner.costs import (
    CPU_DEFAULTS,
    H100_DEFAULTS,
    DeviceRates,
    calibrate,
    op_s,
    ops_s,
    roofline_s,
)
from memopt.planner.emit import lead_sync, plan_strings, sync_windows
from memopt.planner.memory import MemoryProfile, SavedBytes, memory_profile, saved_bytes
from memopt.planner.problem import (
    Candidate,
    OffloadWindow,
    OpCost,
    PlanningProblem,
    StepTimeline,
    lead_windows,
)
from memopt.planner.solution import Solution
from memopt.planner.solver import solve
from memopt.planner.timing import StepTime, step_time

__all__ = [
    "CPU_DEFAULTS",
    "H100_DEFAULTS",
    "MAX_RECOMPUTE_DEPTH",
    "Candidate",
    "DeviceRates",
    "MemoryProfile",
    "OffloadWindow",
    "OpCost",
    "PlanningProblem",
    "SavedBytes",
    "Solution",
    "StepTime",
    "StepTimeline",
    "calibrate",
    "lead_sync",
    "lead_windows",
    "memory_profile",
    "op_s",
    "ops_s",
    "plan_strings",
    "resolve_budget",
    "roofline_s",
    "saved_bytes",
    "solve",
    "step_time",
    "sync_windows",
]


def resolve_budget(budget: int | float, problem: PlanningProblem) -> int:
    """A budget in bytes of peak memory.

    An int is already a peak in bytes. A float ``f`` in (0, 1] keeps that fraction of the
    unoptimized plan's saved-activation bytes: ``peak_keep - (1 - f) * saved_keep``, where
    ``peak_keep`` is the predicted peak with every candidate kept and ``saved_keep`` the sum of
    their sizes.
    """
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise TypeError(f"budget {budget!r} is neither bytes (int) nor a fraction (float)")
    if isinstance(budget, int):
        return budget
    if not 0.0 < budget <= 1.0:
        raise ValueError(f"fractional budget {budget} outside (0, 1]")
    keep_all = PlanningProblem(candidates=problem.candidates, timeline=problem.timeline)
    peak = memory_profile(keep_all, {}).peak
    return int(peak - (1.0 - budget) * problem.saved_bytes_baseline())
