"""The predicted memory of one training step, position by position: without memopt and with
the plan (``memopt plan --timeline`` / ``--plot``; drawn by :mod:`memopt.plot`).

The curves are the budget planner's memory model (:func:`memopt.planner.memory_profile`) of
the unoptimized step's graphs: every saved activation kept (baseline), then the plan's frozen
form (plan strings and sync dict, as :meth:`memopt.decide.Plan.frozen` writes them) applied to
the same candidates, with decide's recompute-chain rule. Positions are the ops of the forward
then the backward; bytes are parameters, inputs and the live tensors of the step (optimizer
states and the gradients' accumulation outside the graph are not in it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memopt import _torch_compat as compat
from memopt.cli.extrapolate import evaluate, rename_expr
from memopt.cli.trace import PlannerInputs
from memopt.plan import Strategy, parse_plans
from memopt.planner.problem import PlanningProblem, covered


def build_problem(
    inputs: PlannerInputs,
    names: Mapping[str, str],
    values: Mapping[str, int],
    *,
    device_kind: str,
    offload_min_bytes: int,
) -> PlanningProblem:
    """The planner's problem of the unoptimized step at ``values`` (``batch``, ``seq``)."""
    from memopt.passes.build_planning_problem import build_planning_problem
    from memopt.planner import CPU_DEFAULTS, H100_DEFAULTS, roofline_s

    rates = H100_DEFAULTS if device_kind == "cuda" else CPU_DEFAULTS

    def value(e):
        return evaluate(rename_expr(inputs.symbols.readable(e), names), values)

    return build_planning_problem(
        inputs.joint,
        inputs.fw,
        inputs.bw,
        inputs.candidates,
        value=value,
        rates_op_s=lambda op: roofline_s(op, rates),
        min_offload_bytes=offload_min_bytes,
        pad_matmuls=device_kind == "cuda" and compat.inductor_pads_matmuls(),
    )


def frozen_decisions(
    problem: PlanningProblem, plan_strings: Sequence[str]
) -> tuple[dict[str, Strategy], list[str]]:
    """Per candidate name, the non-keep strategy the plan strings give it (as decide applies
    them: recomputes that would chain too deep are kept), and notes on what was left out."""
    from memopt.planner.chains import REBUILT, Chains, refused

    decisions: dict[str, Strategy] = {}
    notes: list[str] = []
    for spec in parse_plans(list(plan_strings)):
        cands = problem.clusters.get(spec.cluster_id)
        if not cands:
            notes.append(f"{spec.cluster_id}: not in this step's candidates (not drawn)")
            continue
        for c in covered(cands, spec.count):
            decisions[c.name] = Strategy(int(spec.strategy))
    index = {c.name: i for i, c in enumerate(problem.candidates)}
    rebuilt = {index[n]: s for n, s in decisions.items() if s in REBUILT}
    for i in refused(Chains(problem.candidates), problem.candidates, rebuilt):
        decisions.pop(problem.candidates[i].name)
    return decisions, notes


def step_timeline(
    problem: PlanningProblem, frozen: Mapping[str, Any], label: str = "plan"
) -> dict[str, Any]:
    """Baseline and planned curves (JSON-ready): ``positions`` ops, ``n_fwd`` of them
    forward, ``baseline`` / ``planned`` bytes per position, their peaks and positions, the
    layer starts (``layer_fwd_start``, ``layer_bwd_start``: positions) and notes."""
    from memopt.planner import memory_profile, sync_windows

    tl = problem.timeline
    decisions, notes = frozen_decisions(problem, list(frozen.get("config") or ()))
    sync = {int(k): v for k, v in (frozen.get("sync") or {}).items()}
    windows = sync_windows(sync, tl) if sync else {}
    for name, s in list(decisions.items()):
        c = problem.by_name[name]
        if s == Strategy.OFFLOAD and (c.layer is None or c.layer not in windows):
            decisions.pop(name)
            notes.append(f"{name}: offload without a sync window here (drawn as kept)")
    base = memory_profile(problem, {})
    planned = memory_profile(problem, decisions, windows)
    return {
        "label": label,
        "positions": tl.n_positions,
        "n_fwd": tl.n_fwd,
        "baseline": list(base.curve),
        "planned": list(planned.curve),
        "baseline_peak": base.peak,
        "baseline_peak_pos": base.peak_pos,
        "planned_peak": planned.peak,
        "planned_peak_pos": planned.peak_pos,
        "layer_fwd_start": list(tl.layer_fwd_start),
        "layer_bwd_start": [tl.n_fwd + p for p in tl.layer_bwd_start],
        "decisions": {k: int(v) for k, v in sorted(decisions.items())},
        "notes": notes,
    }
