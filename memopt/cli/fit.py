"""``memopt fit``: the largest batch (or sequence length) whose predicted peak fits a memory.

The peak is a sum of non-negative polynomial terms in the sizes, so it grows with each size;
an exponential then binary search on its value finds the largest integer that fits. One row
per strategy: no optimization (level 0, no plans), level 1 (with the given plans), and the
budget planner, which re-plans at every size it tries (its own memory model, see
docs/planner.md; it needs a full-depth trace).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memopt import _torch_compat as compat
from memopt.cli.extrapolate import evaluate, rename_expr
from memopt.cli.peak import PHASE_TEXT, PeakModel
from memopt.cli.trace import PlannerInputs

#: Largest size tried.
MAX_SIZE = 1 << 24


@dataclass(frozen=True)
class FitRow:
    strategy: str
    largest: int | None
    """Largest size that fits; 0 when even 1 does not; None when not computed."""
    peak_bytes: int | None
    """Predicted peak at ``largest``."""
    note: str = ""
    peak_symbolic: str | None = None
    """The peak as an expression of the sizes (rows that use memopt's peak model)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "strategy": self.strategy,
            "largest": self.largest,
            "peak_bytes": self.peak_bytes,
            "peak_symbolic": self.peak_symbolic,
            "note": self.note,
        }


def largest_fitting(peak_at: Callable[[int], int | None], memory: int) -> tuple[int, int | None]:
    """``(n, peak_at(n))`` for the largest ``n >= 1`` with ``peak_at(n) <= memory``
    (``(0, peak_at(1))`` when none fits)."""

    def fits(n: int) -> bool:
        v = peak_at(n)
        return v is not None and v <= memory

    if not fits(1):
        return 0, peak_at(1)
    lo, hi = 1, 2
    while hi <= MAX_SIZE and fits(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_SIZE:
        return lo, peak_at(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, peak_at(lo)


def fit_model(
    strategy: str, model: PeakModel, memory: int, values: Mapping[str, int], solve_for: str
) -> FitRow:
    def peak_at(n: int) -> int | None:
        return model.at({**values, solve_for: n}).bytes

    n, peak = largest_fitting(peak_at, memory)
    at = model.at({**values, solve_for: max(n, 1)})
    where = PHASE_TEXT.get(at.phase_name, at.phase_name)
    return FitRow(strategy, n, peak, f"peak at the {where}", str(at.total))


def fit_planner(
    inputs: PlannerInputs,
    baseline: PeakModel,
    memory: int,
    names: Mapping[str, str],
    values: Mapping[str, int],
    solve_for: str,
    *,
    device_kind: str,
    offload_min_bytes: int,
) -> FitRow:
    """Largest size at which the budget planner finds a plan within ``memory``.

    The planner sweeps its own problem (same memory rules, its own positions); its plan's saving over
    keeping everything, in that model, is taken off ``baseline`` (memopt's peak with no plan),
    so the row compares with the others."""
    from memopt.passes.build_planning_problem import build_planning_problem
    from memopt.plan import SUPPORTED_STRATEGIES, Strategy
    from memopt.planner import CPU_DEFAULTS, H100_DEFAULTS, memory_profile, roofline_s, solve
    from memopt.planner.chains import planner_depth

    rates = H100_DEFAULTS if device_kind == "cuda" else CPU_DEFAULTS
    # Offload plans only when this build applies them (the planner can always propose them).
    leads = None if Strategy.OFFLOAD in SUPPORTED_STRATEGIES else [None]
    peaks: dict[int, int] = {}

    def peak_at(n: int) -> int | None:
        at = {**values, solve_for: n}

        def value(e):
            return evaluate(rename_expr(inputs.symbols.readable(e), names), at)

        problem = build_planning_problem(
            inputs.joint,
            inputs.fw,
            inputs.bw,
            inputs.candidates,
            value=value,
            fixed=inputs.fixed,
            rates_op_s=lambda op: roofline_s(op, rates),
            min_offload_bytes=offload_min_bytes,
            pad_matmuls=device_kind == "cuda" and compat.inductor_pads_matmuls(),
        )
        keep = memory_profile(problem, {}).peak
        base = baseline.at(at).bytes
        depth = planner_depth(problem.timeline.n_layers)
        sol = solve(problem, memory - base + keep, rates, leads=leads, max_recompute_depth=depth)
        peaks[n] = base - keep + sol.predicted_peak
        return peaks[n] if sol.feasible else max(peaks[n], memory + 1)

    n, _ = largest_fitting(peak_at, memory)
    return FitRow(
        "planner",
        n,
        peaks.get(n) if n else None,
        "budget planner at each size (its saving over no plan, on memopt's peak)",
    )
