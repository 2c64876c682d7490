"""From a model spec and sizes to plan reports and peak models, one per memopt config.

Decides the trace (sizes, symbolic or not, which depths), runs :func:`memopt.cli.trace.trace`
once per depth, renames the shape symbols to ``batch``/``seq``, extrapolates to the full depth
and counts the static bytes (parameters, gradients, optimizer) on the full model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from memopt.cli.errors import EXIT_TRACE, CliError
from memopt.cli.extrapolate import (
    extrapolate_profile,
    extrapolate_region,
    finish_region,
    rename_profile,
)
from memopt.cli.models import ModelSource
from memopt.cli.peak import PeakModel, Static, combine_regions, static_bytes
from memopt.cli.trace import PlannerInputs, TraceResult, trace
from memopt.config import MemoptConfig
from memopt.report import Report

#: Depths traced when extrapolating (consecutive, so one step is one layer).
SMALL_DEPTHS = (2, 3)
#: Models with at most this many layers are traced at full depth by ``--depth auto``
#: (``memopt fit`` uses ``FIT_FULL_DEPTH_UP_TO``: its planner column needs the whole step).
FULL_DEPTH_UP_TO = 6
FIT_FULL_DEPTH_UP_TO = 12


@dataclass(frozen=True)
class Request:
    """What to plan: the sizes, dtype, device kind and optimizer."""

    batch: int
    seq: int
    dtype: torch.dtype | None
    device_kind: str = "cuda"
    depth: str = "auto"
    optimizer: str = "adamw"
    state_dtype: str = "fp32"
    master_weights: bool = False
    momentum: bool = False
    symbolic: bool = True
    emulate_cuda: bool | None = None
    """Plan ``cuda`` on fake CPU tensors with GPU attention kernels (None: when no CUDA)."""


@dataclass
class Analysis:
    """Per config: the plan report and the peak model; plus how the trace was made."""

    source: ModelSource
    request: Request
    configs: list[MemoptConfig]
    reports: list[Report]
    peaks: list[PeakModel]
    static: Static
    names: dict[str, str]
    """Shape symbol -> readable name (``batch``, ``seq``)."""
    values: dict[str, int]
    """Symbol values to evaluate at (the sizes asked for)."""
    traced_depths: list[int | None]
    trace_seconds: float
    device: str
    emulated: bool
    model_class: str
    planner: list[PlannerInputs] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def extrapolated(self) -> bool:
        return len(self.traced_depths) > 1


def trace_sizes(batch: int, seq: int) -> tuple[int, int]:
    """Sizes to trace with: not 1 (dynamo would specialize it), batch != seq (one symbol)."""
    b, s = max(batch, 2), max(seq, 2)
    if b == s:
        b += 1
    return b, s


def choose_depths(
    source: ModelSource,
    request: Request,
    configs: Sequence[MemoptConfig],
    full_depth_up_to: int | None = None,
) -> tuple[list[int | None], str | None]:
    """The depths to trace (``[None]``: the model's own) and why full depth, if forced."""
    n = source.num_layers
    if request.depth == "full" or n is None:
        return [None], None
    if n <= (FULL_DEPTH_UP_TO if full_depth_up_to is None else full_depth_up_to):
        return [None], None
    if any(c.budget is not None for c in configs):
        return [None], "the budget planner plans the whole step: traced at full depth"
    if any(p.count != -1 for c in configs for p in c.plans):
        return [None], "a plan with a Count covers the first N occurrences: traced at full depth"
    return list(SMALL_DEPTHS), None


def _names(symbols: dict[str, int], bt: int, st: int) -> dict[str, str]:
    """Readable names of the traced symbols by their values (the trace's batch ``bt`` and
    sequence ``st``, never equal): ``batch``, ``seq``, or ``batch*seq`` for a symbol dynamo
    gave a later region's flattened tokens (an MoE's router logits, a loss's logits across a
    graph break: its input is ``(batch*seq, ...)``, a size of its own there); where no input
    has the sequence's size (a factory with a fixed length), ``k*batch`` for a multiple of the
    batch (the same rows, ``k`` tokens each)."""
    names = {}
    for k, v in symbols.items():
        if v == bt:
            names[k] = "batch"
        elif v == st:
            names[k] = "seq"
        elif v == bt * st:
            names[k] = "batch*seq"
    if "seq" not in names.values():  # no sequence: what else varies is a number of rows
        for k, v in symbols.items():
            if k not in names and v % bt == 0:
                names[k] = f"{v // bt}*batch"
    return names


def _unsure(symbols: dict[str, int], names: dict[str, str]) -> list[str]:
    """The symbols named only by a guess from their value (``k*batch``) or not named at all:
    a later region's size that dynamo gave a symbol of its own (a data-dependent count, rows
    of a reshape across a graph break)."""
    return [k for k in symbols if k not in names or names[k].endswith("*batch")]


def _confirm(
    names: dict[str, str], unsure: list[str], at1: dict[str, int], at2: dict[str, int], b1, b2
) -> dict[str, str]:
    """``names`` with each unsure symbol judged by its values at two traced batches: the same
    multiple of both batches is ``k*batch``; the same value at both is that number (a size that
    does not grow with the batch: ``nonzero``'s count of valid tokens); anything else stays
    raw (its traced value is in the plan's symbol note)."""
    out = {k: v for k, v in names.items() if k not in unsure}
    for k in unsure:
        v1, v2 = at1[k], at2.get(k)
        if v2 is None:
            continue
        if v1 % b1 == 0 and v2 % b2 == 0 and v1 // b1 == v2 // b2:
            out[k] = f"{v1 // b1}*batch"
        elif v1 == v2:
            out[k] = str(v1)
    return out


def _checked_note(n: int, b2: int) -> list[str]:
    if not n:
        return []
    return [
        f"{n} size symbol{'s' if n != 1 else ''} not named by the inputs' sizes: judged by a "
        f"second trace at batch {b2} (k*batch where it grows with the batch, a number where "
        "it does not, raw otherwise)"
    ]


def _saved_at(run: TraceResult, names: dict[str, str], values: dict[str, int]) -> int | None:
    """The first config's saved bytes before any plan, over its regions, at ``values``."""
    total = 0
    for r in run.runs[0]:
        v = finish_region(r.report, names, values).baseline_saved_bytes
        if v is None:
            return None
        total += v
    return total


def _scales_note(first: TraceResult, again: TraceResult, names, b2: int) -> list[str]:
    """A note where the formulas traced at one batch miss what a trace at batch ``b2`` saves:
    a frame after a graph break read the batch as a number (an int from a shape, a loop over
    the samples), so part of each formula is that batch's constant."""
    at2 = {names.get(k, k): v for k, v in again.symbols.items()}
    at2["batch"] = b2
    said = _saved_at(first, names, at2)
    got = _saved_at(again, names, at2)
    if said is None or got is None or said == got:
        return []
    return [
        f"the formulas hold at the traced batch only: at batch {b2} the step saves {got:,} B "
        f"where they say {said:,} B (a frame after a graph break read the batch as a number, "
        "e.g. an int from a shape or a loop over the samples); plan again at the batch you train"
    ]


def _regions_at_full_depth(i, traces, depths, source, names, values):
    """Config ``i``'s region reports and peak profile at the model's full depth: traced
    there, or extrapolated from the two traced depths."""
    per_depth = [list(t.runs[i]) for t in traces]
    regions = [[finish_region(r.report, names, values) for r in d] for d in per_depth]
    profiles = [
        combine_regions([rename_profile(r.profile, names) for r in d], values) for d in per_depth
    ]
    if len(traces) == 2:
        if len(regions[0]) != len(regions[1]):
            raise CliError(
                f"the model compiles to {len(regions[0])} and {len(regions[1])} graphs at "
                f"depths {depths[0]} and {depths[1]}; use --depth full",
                EXIT_TRACE,
            )
        steps = source.num_layers - depths[1]
        region_list = [
            extrapolate_region(a, b, steps, values) for a, b in zip(regions[0], regions[1])
        ]
        profile = extrapolate_profile(profiles[0], profiles[1], steps)
    else:
        region_list, profile = regions[0], profiles[0]
    for k, r in enumerate(region_list):
        r.index = k
    return region_list, profile


def analyze(
    source: ModelSource,
    request: Request,
    configs: Sequence[MemoptConfig],
    *,
    keep_planner: bool = False,
    full_depth_up_to: int | None = None,
) -> Analysis:
    """Trace ``source`` for every config and build the reports and peak models."""
    configs = list(configs)
    depths, note = choose_depths(source, request, configs, full_depth_up_to)
    if request.symbolic:
        bt, st = trace_sizes(request.batch, request.seq)
    else:
        bt, st = request.batch, request.seq
    t0 = time.perf_counter()
    traces: list[TraceResult] = []
    model_class = ""
    for depth in depths:
        built = source.build(batch=bt, seq=st, dtype=request.dtype, layers=depth)
        model_class = type(built.model).__name__
        traces.append(
            trace(
                built,
                configs,
                device_kind=request.device_kind,
                keep_planner=keep_planner and depth is None,
                dynamic=request.symbolic,
                sizes=(bt, st),
                emulate_cuda=request.emulate_cuda,
            )
        )
    seconds = time.perf_counter() - t0
    full = source.build(batch=bt, seq=st, dtype=request.dtype, layers=None)
    static = static_bytes(
        full.model,
        optimizer=request.optimizer,
        state_dtype=request.state_dtype,
        master_weights=request.master_weights,
        momentum=request.momentum,
    )
    symbols = traces[-1].symbols
    names = _names(symbols, bt, st) if request.symbolic else {}
    unsure = _unsure(symbols, names) if request.symbolic else []
    batch_notes: list[str] = []
    several = len(traces[-1].runs[0]) > 1  # graph breaks: a later frame may fix the batch
    if (unsure or several) and request.symbolic and "batch" in source.sizes:
        bt2 = bt + 1 if bt + 1 != st else bt + 2
        built = source.build(batch=bt2, seq=st, dtype=request.dtype, layers=depths[-1])
        again = trace(built, configs[:1], device_kind=request.device_kind, dynamic=True,
                      sizes=(bt2, st), emulate_cuda=request.emulate_cuda)  # fmt: skip
        names = _confirm(names, unsure, symbols, again.symbols, bt, bt2)
        batch_notes = _checked_note(len(unsure), bt2) + _scales_note(traces[-1], again, names, bt2)
        seconds = time.perf_counter() - t0
    values = {names.get(k, k): v for k, v in symbols.items() if not names.get(k, "x").isdigit()}
    values.update({"batch": request.batch, "seq": request.seq})
    reports, peaks = [], []
    for i, config in enumerate(configs):
        region_list, profile = _regions_at_full_depth(i, traces, depths, source, names, values)
        reports.append(Report(config, region_list))
        peaks.append(PeakModel(static, profile))
    return Analysis(
        source=source,
        request=request,
        configs=configs,
        reports=reports,
        peaks=peaks,
        static=static,
        names=names,
        values=values,
        traced_depths=depths,
        trace_seconds=seconds,
        device=traces[-1].device,
        emulated=traces[-1].emulated,
        model_class=model_class,
        planner=traces[-1].planner,
        notes=([note] if note else [])
        + _trace_notes(traces, len(reports[0].regions))
        + batch_notes,
    )


def _trace_notes(traces: Sequence[TraceResult], regions: int) -> list[str]:
    """The region count when the step compiled to several, then the graph breaks, stand-ins
    and where the trace stopped (each once, across the traced depths)."""
    notes = list(dict.fromkeys(b for t in traces for b in t.breaks))
    if regions > 1 or any(t.stopped for t in traces):
        split = ", split at the graph breaks below" if len(notes) else ""
        notes.insert(
            0,
            f"{regions} compiled region{'s' if regions != 1 else ''}{split}; "
            "each is planned as training compiles it",
        )
    return notes
