"""The step in the report: how the regions ran (:class:`StepInfo`, filled by
:mod:`memopt.state`) and the table section that shows the runs, identical plans folded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from memopt import step_notes
from memopt.format import ranges
from memopt.symbolic import fmt_bytes

if TYPE_CHECKING:
    from memopt.report import RegionReport, Report

#: kinds of a region's inputs that are activations of the step (the backend's
#: ``activation_inputs``): a tensor autograd made, read by one run; a tensor the step made
#: without autograd (a mask), which every run of a layer's region may read; and, in the
#: report's ``saved_inputs`` rows, an output the region saves (a later run may save it too)
PER_RUN, SHARED, OUTPUT = 1, 2, 3
#: ``StepInfo.input_keys``' storage number of a tensor of the optimized model's call: no
#: activation in that run, whatever the row's kind
CALL_TENSOR = -1


@dataclass(frozen=True)
class StepInfo:
    """The training step as the regions ran it (memopt.state): invocations in forward order,
    and the step plan's prediction when a budget planned the step."""

    sequence: tuple[int, ...]
    complete: bool = True
    """False while the first step has not finished (the sequence so far)."""
    forward_known: bool = True
    """Every forward run of the step is in ``sequence`` (its backward has begun), finished or
    not: what the forward saves per step is known (always so when ``complete``)."""
    peak: int | None = None
    peak_at: int | None = None
    """Position in ``sequence`` of the invocation that holds the predicted peak."""
    target: int | None = None
    feasible: bool | None = None
    overhead_s: float | None = None
    overhead_floor_s: float | None = None
    """No step plan that fits the target costs less (memopt.step_bounds)."""
    offload_runs: tuple[int, ...] = ()
    """Runs (positions in ``sequence``) whose saved tensors go to the host (offload_layers
    with layers compiled one per region)."""
    offloaded_bytes: int = 0
    """Bytes those runs copied to the host in the last complete step."""
    prefetched: int = 0
    """Tensors copied back a layer ahead of their backward in the last complete step."""
    offload_steps: int = 0
    """Steps finished under the offload plan (0: a new plan, its bytes not measured yet)."""
    notes: tuple[str, ...] = ()
    measured_peak: int | None = None
    """CUDA peak of a step run on the step plan (byte budgets), when it set a new record."""
    plan_pending: bool = False
    """A step plan exists but was made for a step whose runs differ from this one's (a region
    compiled again, or the model took another path): the step plan's verdict is not this
    step's, and the next step is planned again from this one."""
    step_plans: int = 0
    """Step plans made so far (each compiles the regions whose plan it changes; at most
    memopt.state.MAX_STEP_PLANS)."""
    went_back_from: int | None = None
    """The last step plan's measured peak when it overran the byte budget and the step went
    back to an earlier plan measured inside it, or, none inside, to the one measured lowest
    (memopt.step_fit; ``measured_peak`` is then that plan's, and with the regions' own plans
    ``peak`` is None)."""
    offload_skipped: int = 0
    """Offload runs left alone because other saved-tensor hooks (checkpointing) were active."""
    offload_by: str = ""
    planned_offload_layers: int = 0
    """Layers the step plan chose to offload (0: none, or the user's setting did)."""
    """What set the step offload: the user's setting (``offload_layers=2``, ``sync``) or the
    step plan (``chosen by the step plan: 2 layer(s)``)."""
    run_sizes: tuple[tuple[tuple[str, int], ...], ...] = ()
    """Per run: the sizes its region's symbols had (dynamic regions; one region may run at
    several sizes in a step: an encoder's and a decoder's embedding)."""
    input_keys: tuple[tuple[tuple[int, int], ...], ...] = ()
    """Per run: (argument, storage number in the step) of each saved activation input it was
    called with; runs that save one storage (an encoder output every decoder layer reads)
    share its number."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_input_bytes(runs: Sequence[tuple[RegionReport, Sequence]], i: int) -> int | None:
    """Bytes of the regions' saved activation inputs (``extra["saved_inputs"]``) the step
    holds beyond what each run's own bytes count (``runs``: per run, its region's report and
    ``StepInfo.input_keys``; ``i``: 0 before the plan, 1 after): a :data:`SHARED` one once
    per storage, a :data:`PER_RUN` one (in each run's bytes) less each repeat of a storage an
    earlier run saved, as an input or as an :data:`OUTPUT` of its own (output ``j`` is
    argument ``-1 - j``). Where a run's storages are not known a shared input is one per
    dtype and size and autograd's are distinct. None when a size is unknown."""
    seen: set = set()
    total = 0
    for pos, (r, keys) in enumerate(runs):
        ids = dict(keys)
        for e in r.extra.get("saved_inputs") or ():
            arg = -1 - e["arg"] if e["kind"] == OUTPUT else e["arg"]
            key = ids.get(arg)
            if not e["saved"][i]:
                continue
            if key == CALL_TENSOR:  # in the region's own bytes when autograd's, else not
                if e["kind"] == PER_RUN:
                    total -= e["bytes"] or 0
                continue
            if key is None:
                key = ("dtype", e["dtype"], e["bytes"]) if e["kind"] == SHARED else (pos, arg)
            first = key not in seen
            seen.add(key)
            if e["kind"] != OUTPUT and (e["kind"] == SHARED) == first:
                if e["bytes"] is None:  # a shared storage's first, autograd's repeats
                    return None
                total += e["bytes"] if first else -e["bytes"]
    return total


def _plan_key(r: RegionReport) -> tuple:
    rows = tuple(
        (c["cluster_id"], c["strategy"], c["count"], c["enabled"], c["saving_bytes"])
        for c in r.clusters
    )
    return rows, r.baseline_saved_bytes, r.final_saved_bytes


def _plans_text(plans: Sequence[str], width: int = 48) -> str:
    text = ",".join(plans) or "(keep)"
    return text if len(text) <= width else f"{len(plans)} plans: {text[: width - 14]}..."


def step_section(report: Report) -> str:
    """The step, region runs in forward order; consecutive runs of identical plans folded
    into one row ("runs 2-9 (x8, same plan)")."""
    step = report.step
    by_index = {r.index: r for r in report.regions}
    seq = [i for i in step.sequence if i in by_index]
    groups: list[list[int]] = []  # positions in seq
    for pos, i in enumerate(seq):
        if groups and _plan_key(by_index[seq[groups[-1][0]]]) == _plan_key(by_index[i]):
            groups[-1].append(pos)
        else:
            groups.append([pos])
    rows = []
    for g in groups:
        r = by_index[seq[g[0]]]
        where = f"run {g[0]}" if len(g) == 1 else f"runs {g[0]}-{g[-1]} (x{len(g)}, same plan)"
        regions = sorted({seq[p] for p in g})
        peak = " <- peak" if step.peak_at is not None and step.peak_at in g else ""
        rows.append(
            [
                where,
                ",".join(map(str, regions)),
                fmt_bytes(r.baseline_saved_bytes),
                fmt_bytes(r.final_saved_bytes) + peak,
                _plans_text(r.extra.get("frozen", {}).get("config", ())),
            ]
        )
    head = (
        f"Step: {len(seq)} region run(s) in forward order"
        + ("" if step.complete else " (first step not finished yet)")
        + ", backward in reverse"
    )
    table = tabulate(
        rows,
        headers=["Runs", "Region", "Saved each", "With plan", "Plan"],
        tablefmt="simple",
        disable_numparse=True,
    )
    lines = [head, table]
    if step.offload_runs:
        measured = (
            f"{fmt_bytes(step.offloaded_bytes)} copied per step, {step.prefetched} tensor(s) "
            "copied back ahead of their backward"
            if step.offload_steps
            else "not measured yet: no step has finished under this plan, which offloads from "
            "the step after the one it was made from"
        )
        lines.append(
            f"Step offload{f' ({step.offload_by})' if step.offload_by else ''}: runs "
            f"{ranges(step.offload_runs)} keep their saved tensors in host "
            f"memory from their forward to their backward ({measured})"
        )
    if step.offload_skipped:
        lines.append(
            f"Warning: {step.offload_skipped} offload run(s) left alone: other saved-tensor "
            "hooks (activation checkpointing) own what those runs save"
        )
    if step.peak is not None:
        peak = max(step.peak, step.measured_peak or 0)  # "under the budget" as measured too
        fits = step_notes.fit_word(report.config.budget, peak, step.feasible)
        lines.append(
            f"Step plan: predicted step peak {fmt_bytes(step.peak)} ({fits}; target "
            f"{fmt_bytes(step.target)}), predicted overhead {1e3 * (step.overhead_s or 0):.3f} "
            f"ms per step{_floor_text(step.overhead_floor_s)}"
            + (f"; measured {fmt_bytes(step.measured_peak)}" if step.measured_peak else "")
        )
    if step.plan_pending:
        lines.append(
            "Step plan: made for a step whose region runs differ from this one's (a region "
            "compiled again, or the model took another path); this step ran the regions' own "
            "plans where its runs differ, and the next step is planned from this one"
        )
    if step.went_back_from is not None:
        to = "the regions' own plans" if step.peak is None else "the step plan above"
        budget = report.config.budget
        over = f" {fmt_bytes(budget)}" if isinstance(budget, int) else ""
        lines.append(
            f"Step plans: {step.step_plans} made; the last measured "
            f"{fmt_bytes(step.went_back_from)}, over the budget{over}: the step went back to "
            f"{to}, measured {fmt_bytes(step.measured_peak)}"
            + (
                " (still over: no plan measured inside the budget)"
                if isinstance(budget, int) and (step.measured_peak or 0) > budget
                else ""
            )
        )
    elif step.step_plans > 1:
        lines.append(f"Step plans: {step.step_plans} made (each recompiles the regions it changes)")
    return "\n".join(lines)


def _floor_text(floor: float | None) -> str:
    """The step plan's proven floor (memopt.step_bounds), as the plan line says it."""
    if floor is None:
        return ""
    if floor == float("inf"):
        return " (proven: no plan fits the target)"
    return f" (proven floor {1e3 * floor:.3f} ms)"
