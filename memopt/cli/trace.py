"""Trace a model with fake tensors through the same compile path as training, without codegen.

``torch.compile(model, backend=...)`` runs dynamo and Inductor's ``compile_fx``
(decompositions, joint-graph passes, the partitioner hook) exactly as :func:`memopt.optimize`
does; only Inductor's code generation is replaced by a stub (``inner_compile``) that runs the
partitioned forward graph on the fake inputs, so graph breaks keep working. memopt's pipeline
(:func:`memopt.passes.pipeline.run_pipeline`) runs in the partitioner hook once per requested
config on the same joint graph, so the plan tables agree with training's. Parameters and
inputs are ``FakeTensor``s: nothing is allocated, a 70B model traces on a laptop. The input
dimensions whose size is the batch or the sequence length are marked dynamic, so sizes come
out as expressions of them (other sizes and Python floats stay static, which is faster).

A model whose Python code needs a tensor's value (``.item()``, ``if x.any():``) or calls an op
whose output size depends on values (``nonzero``, ``x[mask]``, ``unique``, ``ctc_loss``)
graph-breaks there in training, and the eager code between the compiled regions runs with real
values. Traced with fake tensors that code has no values: :mod:`memopt.cli.eager` gives it
stand-ins (a value of 1, or an op's largest output), each named with its source line, and every
region is planned as training would plan it. An eager op with no stand-in stops the trace; the
regions before it are planned (:attr:`TraceResult.stopped` says where). The breaks, stand-ins
and the stop are listed in the output (:attr:`TraceResult.breaks`); a size that came from a
stand-in is only as right as the stand-in.

Planning for ``cuda`` on a machine without CUDA traces on fake CPU tensors (autograd needs a
real device backend) and replaces ``F.scaled_dot_product_attention`` by the kernel a GPU would
pick (:mod:`memopt.cli.attention`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn as nn

from memopt import _torch_compat as compat
from memopt import coverage
from memopt.cli.attention import emulate_cuda_attention
from memopt.cli.eager import stand_in_op, stand_in_values, stopped_at
from memopt.cli.errors import EXIT_TRACE, CliError, one_line
from memopt.cli.liveness import StepProfile, step_profile
from memopt.cli.models import Built
from memopt.config import MemoptConfig
from memopt.errors import PlanError
from memopt.partitioner import MemoptPartitioner, MemoptState
from memopt.regions import fuse_loss_section
from memopt.report import RegionReport
from memopt.symbolic import SymbolTable

log = logging.getLogger("memopt")

_DATA_DEPENDENT = frozenset(
    {"DataDependentOutputException", "GuardOnDataDependentSymNode", "DynamicOutputShapeException"}
)


@dataclass
class RegionTrace:
    """One compiled region under one config."""

    report: RegionReport
    profile: StepProfile


@dataclass
class PlannerInputs:
    """What the budget planner needs to re-plan a region at other sizes (kept alive)."""

    joint: torch.fx.GraphModule
    fw: torch.fx.GraphModule
    bw: torch.fx.GraphModule
    candidates: list
    symbols: SymbolTable
    fixed: tuple = ()


@dataclass
class TraceResult:
    """Per config (in the order asked), the regions; plus what the trace was."""

    runs: list[list[RegionTrace]]
    symbols: dict[str, int]
    """Readable symbol name -> its value in the trace (the traced sizes)."""
    device: str
    emulated: bool
    seconds: float
    planner: list[PlannerInputs] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)
    """Graph breaks (dynamo's reasons, with the user line) and stand-in values, in order."""
    stopped: str | None = None
    """Where and why the trace stopped early (an eager op fake tensors cannot run), if it did:
    the regions before it are in ``runs``, nothing after it."""


class _PlanPartitioner(MemoptPartitioner):
    """memopt's partitioner, run once per config; keeps the reports and live-bytes profiles."""

    def __init__(
        self,
        configs: Sequence[MemoptConfig],
        keep_planner: bool,
        device: str,
        pad_matmuls: bool = False,
    ):
        super().__init__(configs[-1], MemoptState(configs[-1]))
        self.device = device
        self.pad_matmuls = pad_matmuls
        self.configs = list(configs)
        self.states = [MemoptState(c) for c in configs]
        self.runs: list[list[RegionTrace]] = [[] for _ in configs]
        self.keep_planner = keep_planner
        self.planner: list[PlannerInputs] = []
        # per input of the region being compiled: an activation of an earlier region (set by
        # the backend, as training's RegionProgram does): saved, it is held for the backward
        self.activation_inputs: tuple[bool, ...] = ()
        # every symbol of the traced graphs at its hint (the inputs' own sizes, e.g. labels of
        # a masked LM, appear only in the inputs' bytes, not in any report)
        self.hints: dict[str, int] = {}
        # the fused loss of the graph being compiled (set by the backend, as training's
        # RegionProgram fuses before compiling), for its regions' reports
        self.fused: dict | None = None

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any):
        from memopt.passes.pipeline import run_pipeline

        static = kwargs.get("static_lifetime_input_indices") or ()
        fw = bw = None
        for i, (config, state) in enumerate(zip(self.configs, self.states)):
            result = run_pipeline(
                gm,
                joint_inputs,
                config,
                dict(kwargs),
                known_elsewhere=state.known_cluster_ids(),
                activation_inputs=self.activation_inputs,
            )
            region = RegionReport.from_pipeline(0, result)
            if self.fused:
                region.extra["fused_loss"] = self.fused
            state.add_region(region)
            profile = step_profile(
                result.fw,
                result.bw,
                kwargs["num_fwd_outputs"],
                result.symbols,
                static,
                device=self.device,
                pad_matmuls=self.pad_matmuls,
                fused=_fused_charges(result.budget),
                activation_inputs=self.activation_inputs,
            )
            self.runs[i].append(RegionTrace(region, profile))
            if self.keep_planner and i == 0:
                self.planner.append(
                    PlannerInputs(gm, result.fw, result.bw, result.candidates, result.symbols)
                )
            fw, bw = result.fw, result.bw
            self.hints.update(result.symbols.with_graph(result.fw).values)
        return fw, bw


def _fused_charges(budget: Any) -> list[tuple[str, int]]:
    """The fused-kernel charges of the recomputes a budget plan applies (``budget``: the
    region's ``passes.plan_budget.BudgetResult``, None without a budget)."""
    from memopt.plan import Strategy
    from memopt.planner.memory import applied_strategy

    if budget is None or budget.solution is None or budget.problem is None:
        return []
    decisions = budget.solution.decisions
    return [
        (at, nbytes)
        for c in budget.problem.problem.candidates
        if applied_strategy(c, decisions.get(c.name, Strategy.KEEP)) == Strategy.RECOMPUTE
        for at, (_, nbytes) in zip(c.fused_at, c.fused_charges)
    ]


def _fake_tensor(mode, t: torch.Tensor, device: torch.device) -> torch.Tensor:
    with mode:
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)


def fakeify(
    built: Built, device: torch.device, stand_ins: list[str] | None = None
) -> tuple[nn.Module, tuple, dict]:
    """Replace every parameter, buffer, input tensor and plain meta tensor attribute of a
    module by a FakeTensor on ``device``.

    Ties are kept: a parameter or buffer held by several modules (a word embedding that is
    also the LM head's weight) becomes one fake, shared by all of them, so dynamo sees one
    graph input with one gradient, as in training. With ``stand_ins``, eager ops on them that
    need values get stand-ins (:func:`memopt.cli.eager.stand_in_op`), each noted there."""
    if stand_ins is None:
        mode = compat.fake_tensor_mode()
    else:
        mode = compat.fake_tensor_mode_with_stand_ins(stand_in_op(stand_ins))
    # id of a real tensor -> (the tensor, kept alive so that its id stays its own; its fake)
    fakes: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def fake_of(t: torch.Tensor, parameter: bool) -> torch.Tensor:
        if id(t) not in fakes:
            fake = _fake_tensor(mode, t, device)
            if parameter:
                fake = nn.Parameter(fake, requires_grad=t.requires_grad)
            fakes[id(t)] = (t, fake)
        return fakes[id(t)][1]

    for module in built.model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = fake_of(p, True)
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = fake_of(b, False)
        # plain tensor attributes made on the meta device hold no data (diffusers' QwenImage
        # rotary frequencies, kept out of the buffers on purpose): "Cannot copy out of meta
        # tensor" at their first use. Not ones with data: .to() moves none, as in training
        for name, v in list(vars(module).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter) and v.is_meta:
                setattr(module, name, fake_of(v, False))

    def conv(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return _fake_tensor(mode, x, device)
        if isinstance(x, tuple | list):
            return type(x)(conv(y) for y in x)
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        return x

    return built.model, conv(built.args), conv(built.kwargs)


def _no_codegen(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    """Inductor's ``inner_compile`` stand-in: run the graph on fake tensors, generate nothing."""

    def run(*args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list):  # boxed convention
            args = tuple(args[0])
        return gm(*args)

    return run


def _mark_sizes(values: Sequence[Any], sizes: Sequence[int]) -> None:
    """Mark the input dimensions of the batch (``sizes[0]``: a leading dimension, or a
    multiple of it there: MusicGen's ids are ``(batch * codebooks, seq)``; a second trace at
    another batch tells such a guess from the model's own size, :func:`memopt.cli.analyze`)
    and the sequence (``sizes[1]``, anywhere) dynamic. Another dimension of the batch's size
    is the model's own (UNet3D's frames at batch 2 made its activations ``batch^2``)."""
    for x in values:
        if isinstance(x, torch.Tensor):
            for d in range(x.dim()):
                n = x.shape[d]
                rows = d == 0 and sizes[0] > 1 and n % sizes[0] == 0
                if n > 1 and (rows or n in sizes[1:]):
                    compat.mark_dynamic(x, d)
        elif isinstance(x, list | tuple):
            _mark_sizes(x, sizes)
        elif isinstance(x, dict):
            _mark_sizes(list(x.values()), sizes)


@contextlib.contextmanager
def _emulate_cuda() -> Iterator[None]:
    """GPU attention kernels, GPU rates for the budget planner (which otherwise reads the
    device of the fake CPU tensors), and the RNG state a recomputed seeded op saves sized as
    on CUDA (none: Inductor's graph-safe RNG functionalization; not the CPU generator's
    5,056 B)."""
    import memopt.passes.plan_budget as plan_budget
    from memopt.planner import H100_DEFAULTS

    original = plan_budget.device_rates
    plan_budget.device_rates = lambda device, budget=None: H100_DEFAULTS
    try:
        with emulate_cuda_attention(), compat.planning_for_cuda():
            yield
    finally:
        plan_budget.device_rates = original


def graph_breaks() -> list[str]:
    """Dynamo's graph-break reasons since its last reset, each with the user's line.
    (A private dynamo list: read here only, for the CLI's notes.)"""
    out = []
    for r in compat.graph_break_reasons():
        stack = getattr(r, "user_stack", None) or []
        where = f"{os.path.basename(stack[-1].filename)}:{stack[-1].lineno}" if stack else "?"
        lines = str(getattr(r, "reason", r)).strip().splitlines()
        out.append(f"graph break at {where}: {lines[0][:160] if lines else '?'}")
    return list(dict.fromkeys(out))


@contextlib.contextmanager
def _quiet_compile() -> Iterator[None]:
    with compat.no_compile_caches(), compat.dynamo_config(suppress_errors=False):
        yield


def trace(
    built: Built,
    configs: Sequence[MemoptConfig],
    *,
    device_kind: str,
    keep_planner: bool = False,
    dynamic: bool = True,
    sizes: Sequence[int] = (),
    emulate_cuda: bool | None = None,
) -> TraceResult:
    """Trace one training step of ``built`` (meta model and inputs) for each config.

    With ``dynamic``, the input dimensions of ``sizes`` (the batch and sequence length the
    model was built with: a leading dimension of the batch's size, any of the sequence's) are
    traced symbolically. ``emulate_cuda``: trace
    a ``cuda`` plan on fake CPU tensors with GPU attention kernels (default: when no CUDA)."""
    if emulate_cuda is None:
        emulate_cuda = not torch.cuda.is_available()
    emulated = device_kind == "cuda" and emulate_cuda
    device = torch.device("cpu" if emulated else device_kind)
    t0 = time.perf_counter()
    stand_ins: list[str] = []
    model, args, kwargs = fakeify(built, device, stand_ins)
    partitioner = _PlanPartitioner(
        configs,
        keep_planner,
        device.type,
        pad_matmuls=device_kind == "cuda" and compat.inductor_pads_matmuls(),
    )

    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
        graphs.append(gm)
        # the loss fused as training fuses it (a budget's default, or fuse_loss=True)
        partitioner.fused = fuse_loss_section(configs[-1], partitioner.state, gm)
        partitioner.activation_inputs = tuple(
            isinstance(x, torch.Tensor) and x.grad_fn is not None for x in example_inputs
        )
        return compat.compile_fx(
            gm,
            example_inputs,
            inner_compile=_no_codegen,
            config_patches={"custom_partitioner_fn": partitioner},
        )

    compat.dynamo_reset()
    if dynamic:
        _mark_sizes((*args, *kwargs.values()), sizes)
    compiled = torch.compile(model, backend=backend)
    emulation = _emulate_cuda if emulated else contextlib.nullcontext
    breaks: list[str] = []
    stopped = None
    try:
        with _quiet_compile(), emulation():
            _first_call(model, args, kwargs)
        with _quiet_compile(), emulation(), stand_in_values(stand_ins):
            compiled(*args, **kwargs)
    except (PlanError, CliError):
        raise
    except Exception as e:
        cause = compat.unwrap_backend_error(e)
        if isinstance(cause, PlanError):
            raise cause from None
        where = stopped_at(cause, cause.__traceback__)
        if where is None or not partitioner.runs[0]:
            _raise_trace_error(cause, where, graph_breaks() + stand_ins)
        stopped = _stopped_note(cause, where, len(partitioner.runs[0]))
    finally:
        breaks = graph_breaks()
        compat.dynamo_reset()
    if not partitioner.runs[0] and not graphs:  # Dynamo skipped the forward: it runs eagerly
        raise CliError(
            f"torch.compile compiled no graph of {type(built.model).__name__}'s forward (it "
            f"would train eagerly, with nothing to plan). {coverage.cause(built.model)}",
            EXIT_TRACE,
        )
    if not partitioner.runs[0]:
        raise CliError(
            "tracing produced no training graph (does the model have parameters that require "
            "grad, and does its forward use them?)",
            EXIT_TRACE,
        )
    symbols: dict[str, int] = {}
    for region_trace in partitioner.runs[0]:
        for k, v in region_trace.report.symbols.items():
            symbols.setdefault(k, v)
    for p in partitioner.planner:
        symbols.update({k: v for k, v in p.symbols.values.items() if k not in symbols})
    symbols.update({k: v for k, v in partitioner.hints.items() if k not in symbols})
    return TraceResult(
        runs=partitioner.runs,
        symbols=symbols,
        device=str(device),
        emulated=emulated,
        seconds=time.perf_counter() - t0,
        planner=partitioner.planner,
        breaks=breaks + stand_ins + ([stopped] if stopped else []),
        stopped=stopped,
    )


def _first_call(model: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """One eager forward without grad before the trace, so that it traces the step training
    runs from its second step on: a model's one-time setup at its first call is done
    (transformers 5 installs its output-capturing hooks under a threading.Lock, a graph break
    in the first compiled call only: DPT traced 2 regions where training runs 1 after its
    first step). Best effort: a forward that fails eagerly on fake tensors is left to the
    trace, which names what fails."""
    try:
        with torch.no_grad(), stand_in_values([]):
            model(*args, **kwargs)
    except Exception as e:  # the trace that follows raises or notes it, as before
        log.debug("memopt plan: the eager first call failed (%s: %s)", type(e).__name__, e)


def _stopped_note(cause: BaseException, where: str, regions: int) -> str:
    return (
        f"trace stopped at {where}: eager code between graphs that fake tensors cannot run "
        f"({type(cause).__name__}: no stand-in for this op); planned: the {regions} "
        f"region{'s' if regions != 1 else ''} before it; not planned: everything after it, "
        "its own backward included (the predicted peak leaves them out)"
    )


def _raise_trace_error(cause: BaseException, where: str | None, done: list[str]) -> None:
    after = f" (after: {'; '.join(done)})" if done else ""
    if where is not None:  # an eager op before any region: nothing to plan
        raise CliError(
            f"tracing failed at {where}: eager code before any compiled region needs values "
            f"(fake tensors have shapes but no values) and this op has no stand-in "
            f"({one_line(cause)}){after}",
            EXIT_TRACE,
        ) from None
    hint = ""
    if type(cause).__name__ in _DATA_DEPENDENT:
        hint = (
            " (the model's Python code needs a tensor's value, e.g. `if x.sum() > 0:` or "
            "`.item()`; fake tensors have shapes but no values)"
        )
    raise CliError(f"tracing failed: {one_line(cause)}{hint}{after}", EXIT_TRACE) from None
