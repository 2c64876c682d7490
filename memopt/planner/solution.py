"""What the solver returns: the chosen plan, its predictions and the proven bounds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from memopt.plan import Strategy
from memopt.planner.emit import SyncEntry
from memopt.planner.memory import SavedBytes
from memopt.planner.timing import StepTime


@dataclass(frozen=True)
class Solution:
    """The chosen plan and what the models predict for it."""

    feasible: bool
    """Whether the predicted peak fits the budget. If not, the plan is the smallest-peak one found."""
    budget_bytes: int
    decisions: dict[str, Strategy]
    """Non-keep decision per candidate name, as applied (a recompute that decide keeps because
    of the chain rule is left out)."""
    cluster_plans: dict[str, tuple[Strategy, int]]
    """Per planned cluster ``(strategy, n)``: its first ``n`` candidates take the strategy
    (explicit plans are not repeated here; they are in ``plan_strings``)."""
    plan_strings: tuple[str, ...]
    """``ClusterId:Strategy:Count`` strings (the user's explicit plans included, verbatim)."""
    sync: dict[int, SyncEntry]
    """Per-layer sync dict for the offloaded layers (empty without offload)."""
    lead: int | None
    """Uniform offload lead of ``sync`` (None without offload)."""
    predicted_peak: int
    baseline_peak: int
    """Peak of the unoptimized plan (every candidate kept, no explicit plans)."""
    time: StepTime
    baseline_step_s: float
    saved: SavedBytes
    """Predicted saved-activation bytes of the plan."""
    min_feasible_peak: int | None
    """Smallest peak found when the budget is infeasible (None when feasible)."""
    peak_lower_bound: int
    """No plan in the search space has a smaller peak."""
    overhead_lower_bound_s: float
    """No plan within the budget has a smaller overhead (``inf`` when none fits)."""
    exact: bool
    """Whether every lead's space was enumerated (the plan is optimal for the models)."""
    notes: tuple[str, ...] = field(default=())
    covered: dict[str, Strategy] = field(default_factory=dict)
    """Non-keep decision per candidate the plan strings cover, chain-kept ones included."""

    @property
    def predicted_overhead_s(self) -> float:
        return self.time.overhead_s

    @property
    def gap_s(self) -> float:
        """Overhead above the proven lower bound (0 when exact)."""
        return max(0.0, self.time.overhead_s - self.overhead_lower_bound_s)

    def freeze(self) -> dict[str, object]:
        """Keyword arguments that re-apply this plan without planning (``config``, ``sync``)."""
        return {"config": ",".join(self.plan_strings), "sync": dict(self.sync)}

    def summary(self) -> str:
        """A few lines for the report."""
        pct = 100.0 * self.time.overhead_s / self.baseline_step_s if self.baseline_step_s else 0.0
        head = "fits" if self.feasible else "INFEASIBLE"
        lines = [
            f"budget {fmt_bytes(self.budget_bytes)}: {head}; predicted peak "
            f"{fmt_bytes(self.predicted_peak)} (unoptimized {fmt_bytes(self.baseline_peak)})",
            f"predicted overhead {self.time.overhead_s * 1e3:.3f} ms (+{pct:.1f}% of "
            f"{self.baseline_step_s * 1e3:.3f} ms): recompute {self.time.recompute_s * 1e3:.3f}"
            f" ms, offload stalls {self.time.d2h_stall_s * 1e3:.3f} ms, reload stalls "
            f"{self.time.h2d_stall_s * 1e3:.3f} ms, copy ops {self.time.copy_ops_s * 1e3:.3f} ms",
        ]
        if self.feasible:
            bound = (
                "optimal"
                if self.exact
                else f"lower bound {self.overhead_lower_bound_s * 1e3:.3f} ms"
            )
            lines.append(f"solver: {bound}")
        else:
            lines.append(
                f"smallest peak found {fmt_bytes(self.min_feasible_peak or 0)}; no plan has a "
                f"peak below {fmt_bytes(self.peak_lower_bound)}"
            )
        # ", " between plan strings: the line stays a valid MEMOPT_CONFIG value and wraps
        # long ids in their short form, which plan strings accept (memopt.plan.expand_short_ids)
        from memopt.format import short_plan_strings

        plans = short_plan_strings(self.plan_strings)
        lines.append("plan: " + (", ".join(plans) or "(keep everything)"))
        if self.sync:
            lines.append(f"sync (lead {self.lead}): {self.sync}")
        lines += [f"note: {n}" for n in self.notes]
        from memopt.format import wrap_line

        return "\n".join(part for line in lines for part in wrap_line(line))

    def to_dict(self) -> dict[str, object]:
        return {
            "feasible": self.feasible,
            "budget_bytes": self.budget_bytes,
            "predicted_peak": self.predicted_peak,
            "baseline_peak": self.baseline_peak,
            "predicted_overhead_s": self.time.overhead_s,
            "recompute_s": self.time.recompute_s,
            "offload_stall_s": self.time.d2h_stall_s,
            "reload_stall_s": self.time.h2d_stall_s,
            "copy_ops_s": self.time.copy_ops_s,
            "baseline_step_s": self.baseline_step_s,
            "saved_bytes_on_device": self.saved.on_device,
            "saved_bytes_offloaded": self.saved.offloaded,
            "plan_strings": list(self.plan_strings),
            "sync": {str(k): list(v) for k, v in self.sync.items()},
            "min_feasible_peak": self.min_feasible_peak,
            "peak_lower_bound": self.peak_lower_bound,
            "overhead_lower_bound_s": (
                None if math.isinf(self.overhead_lower_bound_s) else self.overhead_lower_bound_s
            ),
            "exact": self.exact,
            "notes": list(self.notes),
        }


def fmt_bytes(n: int) -> str:
    return f"{n / 2**30:.3f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.2f} MiB"
