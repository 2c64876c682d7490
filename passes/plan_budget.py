"""plan_budget: run the budget planner on one compiled graph and return the plans it chose.

FX in (baseline partition, candidates), plain data to the solver (memopt.planner), plan
strings out. The user's explicit plans, and the clusters the level enables, are fixed: the
planner works around them. Device rates come from a one-time calibration on CUDA (cached under
the memopt cache dir) and from documented defaults on CPU.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import kernel_times
from memopt.candidates import SavedActivation
from memopt.config import MemoptConfig, cache_dir
from memopt.decide import decide
from memopt.passes.build_planning_problem import Sizes, build_planning_problem
from memopt.plan import PlanSpec, Strategy, parse_plans
from memopt.planner import CPU_DEFAULTS, calibrate, op_s, resolve_budget, solve
from memopt.symbolic import SymbolTable, fmt_bytes

log = logging.getLogger("memopt")


@dataclass
class BudgetResult:
    plans: tuple[PlanSpec, ...]
    solution: Any  # memopt.planner.Solution; None when the step plan assigned the plans
    budget_bytes: int
    unknown_sizes: tuple[str, ...] = ()  # nodes whose size could not be evaluated
    sync: dict | None = None
    """The sync dict the planner's offload windows assume (None without offload)."""
    problem: RegionProblem | None = None
    """The region's planning problem, kept for the step plan (memopt.step)."""
    text: str = ""
    retime: Callable[[RegionProblem], RegionProblem | None] | None = None
    """Where kernels had no room to be timed as the region compiled: times them when called
    (between steps) and returns the region's problem priced with them, or None while none
    could be timed (:func:`_retimer`; not persisted)."""


@dataclass(frozen=True)
class RegionProblem:
    """What the step planner needs of one region (plain, picklable data)."""

    problem: Any  # memopt.planner.PlanningProblem
    rates: Any  # memopt.planner.DeviceRates
    device_type: str
    saved_input_bytes: int = 0
    """Saved inputs that are activations of earlier regions (held whatever the plan)."""
    max_depth: int = 2
    """The chain rule the region's plans are solved and applied with
    (:func:`memopt.planner.chains.planner_depth`)."""
    decisions: Mapping[str, Any] | None = None
    """The region's own plan (solved at its own budget), per candidate as applied, and its
    sync dict (:mod:`memopt.step_excess` models the compiled plan at each position)."""
    sync: Mapping[int, Any] | None = None


def _device(inputs: Sequence[Any]) -> torch.device:
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return x.device
        if isinstance(x, list | tuple):
            for y in x:
                if isinstance(y, torch.Tensor):
                    return y.device
    return torch.device("cpu")


_AGREED: dict[str, Any] = {}
"""CUDA device name -> the rates every rank of the process group plans with."""

#: Seconds a rank waits for its host's first rank to calibrate (at world size > 1 without
#: memopt.optimize's agreement: ``torch.compile(backend="memopt")``).
LEADER_WAIT_S = 120.0


def measure_room(device: torch.device, budget: object = None) -> int:
    """Device bytes memopt's measurements may take now: the device's free memory, and under a
    byte budget the budget's target (less the CUDA reserve) less what is allocated."""
    from memopt._torch_compat import allocator

    cap = step_bytes(budget, "cuda") if isinstance(budget, int) else None
    return allocator.device_room(device, cap)


def device_rates(device: torch.device, budget: object = None):
    """The rates plans are priced with (calibrated once per device and torch, then cached);
    ``budget``: the config's, so that a calibration inside a step stays under it."""
    if device.type != "cuda":
        return CPU_DEFAULTS
    name = torch.cuda.get_device_name(device)
    agreed = _AGREED.get(name)
    if agreed is not None:
        return agreed
    where = os.path.join(cache_dir(), "rates")
    from memopt import ranks

    room = functools.partial(measure_room, device, budget)  # asked only when measuring
    if ranks.world_size() == 1:
        return calibrate(device, where, room=room)
    _AGREED[name] = rates = _from_rank0(device, where, room)
    return rates


def _from_rank0(device: torch.device, where: str, room: Callable[[], int] | None = None):
    """Rates without memopt.optimize's agreement (``torch.compile(backend="memopt")`` at world
    size > 1, where a collective inside a compile could hang): rank 0 calibrates (or reads its
    cache) and publishes its rates in the process group's key-value store; the other ranks wait
    for them there (:mod:`memopt.ranks`), so every rank plans with rank 0's rates, whatever
    cache dir each one has."""
    from memopt import ranks
    from memopt.planner import DeviceRates

    key = f"memopt/rates/v1/{torch.cuda.get_device_name(device)}"
    if ranks.rank() == 0 or ranks.store() is None:
        rates = calibrate(device, where, room=room)
        ranks.publish({key: vars(rates)})
        return rates
    got = ranks.from_store([key], LEADER_WAIT_S).get(key)
    if got is not None:
        return DeviceRates(**got)
    _warn_unagreed(f"no rates from rank 0 in {LEADER_WAIT_S:.0f} s")
    return calibrate(device, where, room=room)


_unagreed_warned = False


def _warn_unagreed(why: str) -> None:
    global _unagreed_warned
    if _unagreed_warned:
        return
    _unagreed_warned = True
    log.warning(
        "memopt: world size > 1 and the device rates were not agreed between all ranks (%s; "
        "memopt.optimize agrees them): budget plans may differ between ranks",
        why,
    )


def agree_device_rates() -> None:
    """At world size > 1 on CUDA, every rank plans with rank 0's rates (calibrated there
    alone, or read from its cache), so the ranks' plans agree; called by memopt.optimize,
    where every rank is. Measured on rank 0 alone, the PCIe rates are one GPU's, not what
    several ranks copying at once each get."""
    from memopt import ranks

    if ranks.world_size() == 1 or not torch.cuda.is_available():
        return
    if "nccl" not in str(torch.distributed.get_backend()).lower():
        return  # a CPU-only group: the ranks plan CPU graphs (constant rates)
    device = torch.device("cuda", torch.cuda.current_device())
    name, mine = torch.cuda.get_device_name(device), None
    if ranks.rank() == 0:
        where = os.path.join(cache_dir(), "rates")
        room = functools.partial(measure_room, device)
        mine = _AGREED.get(name) or calibrate(device, where, room=room)
    _AGREED[name] = ranks.from_rank0(mine)


_allocator_warned = False


def allocator_note(device_type: str, budget: object, env: Mapping[str, str]) -> str | None:
    """A warning when an absolute CUDA budget meets the default (non-expandable) allocator.

    The planner fits allocated bytes; the caching allocator can hold freed blocks that a large
    request cannot reuse. Measured on an H100 (benchmarks/largest_batch.py, 8-layer Llama under
    a 16 GiB cap): batch 16 went out of memory with 13.25 GiB allocated and 2.47 GiB reserved but
    free; with expandable segments batches up to 24 trained."""
    if device_type != "cuda" or not isinstance(budget, int):
        return None
    conf = env.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "")
    if "expandable_segments:True" in conf:
        return None
    return (
        "memopt: budget planning fits allocated bytes, but the default CUDA caching allocator "
        "can fragment under a tight absolute budget and run out of memory below it; set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA starts"
    )


#: Share of an absolute CUDA budget the planner leaves free for memory outside the graphs.
CUDA_RESERVE_FRACTION = 0.025


def plan_budget(
    joint: torch.fx.GraphModule,
    fw: torch.fx.GraphModule,
    bw: torch.fx.GraphModule,
    candidates: Sequence[SavedActivation],
    symbols: SymbolTable,
    config: MemoptConfig,
    joint_inputs: Sequence[Any],
    held_bytes: int = 0,
    plans: Sequence[PlanSpec] | None = None,
    layout_copies: Sequence[torch.fx.Node] = (),
    kernels: Mapping[str, float] | None = None,
    max_depth: int = 2,
    deferred: dict[str, torch.fx.Node] | None = None,
    cuda_graphs: bool = False,
) -> BudgetResult:
    """Solve the region's plan. ``held_bytes``: activation bytes that regions run earlier in
    the step keep while this one runs (a byte budget is for the step: this region gets what
    they leave). ``plans``: the user's plans as this run applies them (default
    ``config.plans``). ``kernels``: kernel times measured on the device by signature
    (memopt.kernel_times); the ops without one are priced by the roofline. ``max_depth``: the
    chain rule (:func:`memopt.planner.chains.planner_depth` of the region's layers).
    ``deferred``: kernels that had no room to be timed now (``kernel_times.measure``), for the
    result's ``retime``. ``cuda_graphs``: the region runs as CUDA graphs (their copies of the
    backward's tangents are counted; no tensor is offered for offload)."""
    fixed = list(config.plans if plans is None else plans)
    if config.level >= 1:
        named = {p.cluster_id for p in fixed}
        for c in candidates:
            if c.cluster_id and c.cluster_id not in named:
                s = c.default_strategy
                if s == Strategy.RECOMPUTE or (s == Strategy.COMPROMISE and config.level >= 2):
                    fixed.append(PlanSpec(c.cluster_id, s, -1))
                    named.add(c.cluster_id)
    device = _device(joint_inputs)
    rates = device_rates(device, config.budget)
    value = lambda e: symbols.evaluate(symbols.readable(e))  # noqa: E731

    def build(times: Mapping[str, float], sizes: Sizes | None = None):
        sizes = sizes or Sizes(value, kernel_s=kernel_times.lookup(times, value))
        return build_planning_problem(
            joint,
            fw,
            bw,
            candidates,
            value=value,
            fixed=fixed,
            rates_op_s=lambda op: op_s(op, rates),
            # the offload pass switched off, or CUDA graphs (whose pools take a copy of each
            # reloaded tensor: memopt.api): budget plans recompute only
            min_offload_bytes=2**62
            if "offload" in config.disable_passes or cuda_graphs
            else config.offload_min_bytes,
            pad_matmuls=device.type == "cuda" and compat.inductor_pads_matmuls(),
            sizes=sizes,
            layout_copies=layout_copies,
            cuda_graphs=cuda_graphs,
        )

    sizes = Sizes(value, kernel_s=kernel_times.lookup(kernels or {}, value))
    problem = build(kernels or {}, sizes)
    if sizes.unknown:
        log.warning(
            "memopt budget: %d tensor(s) of unknown size (data-dependent shapes: %s) are kept "
            "and not counted in the predicted peak",
            len(sizes.unknown),
            ", ".join(sorted(sizes.unknown)[:5]),
        )
    budget = resolve_budget(config.budget, problem)
    global _allocator_warned
    note = allocator_note(device.type, config.budget, os.environ)
    if note is not None and not _allocator_warned:
        _allocator_warned = True
        log.warning(note)
    if isinstance(config.budget, int):
        budget = step_bytes(config.budget, device.type) - held_bytes
    solution = solve(problem, budget, rates, max_recompute_depth=max_depth)
    _check_applied(solution, candidates, symbols, max_depth)
    plans = parse_plans(solution.plan_strings)
    if not solution.feasible:
        log.warning(
            "memopt: budget %s (%s) is infeasible for this graph; the smallest feasible "
            "predicted peak is %s (using that plan; a step of several compiled regions is "
            "planned as a whole after its first run: see the report's step plan)%s",
            config.budget,
            fmt_bytes(budget),
            fmt_bytes(solution.min_feasible_peak),
            _no_lower(solution, problem),
        )
    return BudgetResult(
        plans,
        solution,
        budget,
        tuple(sorted(sizes.unknown)),
        sync=dict(solution.sync) or None,
        problem=RegionProblem(
            problem,
            rates,
            device.type,
            max_depth=max_depth,
            decisions=dict(solution.decisions),
            sync=dict(solution.sync),
        ),  # fmt: skip
        retime=_retimer(deferred, dict(kernels or {}), build, device, value, config.budget),
        text="Budget planner: "
        + (f"{fmt_bytes(held_bytes)} held by earlier regions; " if held_bytes else "")
        + solution.summary(),
    )


def _retimer(
    deferred: dict[str, torch.fx.Node] | None,
    times: dict[str, float],
    build: Callable[[Mapping[str, float]], Any],
    device: torch.device,
    value: Callable,
    budget: object,
) -> Callable[[RegionProblem], RegionProblem | None] | None:
    """A region compiled mid-step under a byte budget may find no room to time its kernels
    (the step's earlier activations fill the budget): those are priced by the roofline, which
    is off by several times for short kernels (Whisper's decoder regions on an H200, thirty-
    second session). The step planner calls this between steps, when the room is back: the
    deferred kernels are timed and the region's problem is built again with their times.
    None when nothing was deferred."""
    if not deferred:
        return None
    where = os.path.join(cache_dir(), "rates")

    def retime(rp: RegionProblem) -> RegionProblem | None:
        if not deferred:
            return None
        room = functools.partial(measure_room, device, budget)
        got = kernel_times.measure_nodes(deferred, device, value, where, room=room)
        if not got:  # none fitted yet (deferred held only kernels that ``times`` lacks)
            return None
        times.update(got)
        return replace(rp, problem=build(times))

    return retime


def step_bytes(budget: int, device_type: str) -> int:
    """A byte budget less what no graph shows on CUDA (cuBLAS/cuDNN workspaces, allocator
    rounding: the unoptimized 8-layer Llama of benchmarks/pareto.py measured 106 MiB, 1.6%,
    above the prediction)."""
    if device_type == "cuda":
        return budget - int(CUDA_RESERVE_FRACTION * budget)
    return budget


def assigned_result(plans: Sequence[str], sync: Mapping | None, text: str) -> BudgetResult:
    """The plan the step planner assigned to this region (no solve here)."""
    return BudgetResult(
        parse_plans(list(plans)),
        None,
        0,
        sync={int(k): tuple(v) for k, v in sync.items()} if sync else None,
        text=text,
    )


def _check_applied(
    solution, candidates: Sequence[SavedActivation], symbols: SymbolTable, max_depth: int
) -> None:
    """The planner knows decide's chain rule (``SavedActivation.recompute_reads``), so decide
    applies its plan strings as solved; say so loudly if it ever does not, either way (a
    tensor the solver's chain rounds kept that decide recomputes made ResNet-50's predicted
    peak 504 MB high, unseen, until the solver priced the applied plan)."""
    applied = decide(
        candidates,
        level=0,
        plans=parse_plans(solution.plan_strings),
        value=symbols.evaluate,
        max_depth=max_depth,
    ).per_root
    rebuilt = (Strategy.RECOMPUTE, Strategy.COMPROMISE)
    missed = sorted(
        n for n, s in solution.decisions.items() if s in rebuilt and applied.get(n) != s
    )
    extra = sorted(
        n
        for n, s in applied.items()
        if s in rebuilt and n in solution.covered and solution.decisions.get(n) != s
    )
    for names, does, off in ((missed, "keeps", "low"), (extra, "recomputes", "high")):
        if names:
            log.warning(
                "memopt budget: decide %s %d tensor(s) the plan %s (%s); the predicted peak "
                "is %s by their bytes",
                does, len(names), "recomputes" if does == "keeps" else "keeps",
                ", ".join(names[:5]), off,
            )  # fmt: skip


def _no_lower(solution: Any, problem: Any) -> str:
    """Why, when no plan lowers the graph's peak at all (a small batch: weights and gradients
    outweigh the activations)."""
    if (solution.min_feasible_peak or 0) < solution.baseline_peak:
        return ""
    return (
        f". No plan lowers this graph's peak ({fmt_bytes(solution.baseline_peak)}): what is live "
        "there is no saved activation a plan could drop (weights, gradients, the backward's own "
        f"buffers; the saved activations total {fmt_bytes(problem.saved_bytes_baseline())})"
    )
