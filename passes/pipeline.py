"""The memopt pass pipeline: one list of passes, one runner. Called by the partitioner on
each joint graph.

Every pass has one shape, ``pass(region: Region) -> Region``: it reads and writes the
:class:`Region` record (graphs, analysis, the Plan). :data:`PASSES` lists them in order; the
runner times each one, runs ``graph.lint()`` on the graphs after it, logs it at debug level
(at INFO with ``MEMOPT_DEBUG=1``) and skips the passes the config switches off
(``disable_passes=`` or ``MEMOPT_DISABLE_PASSES``). docs/architecture.md is written from this
table (a test checks that every pass is there).

=========================  =================================  ===============================
pass                       what it does                       file
=========================  =================================  ===============================
detect_layers              tag each joint node's layer        passes/detect_layers.py
partition                  baseline min-cut partition         memopt/_torch_compat/
find_saved_activations     the saved activations, by storage  passes/find_saved_activations.py
find_recompute_subgraphs   recompute subgraph per storage     passes/find_recompute_subgraphs.py
cluster_subgraphs          ORT-style cluster ids, sizes       passes/cluster_subgraphs.py
plan_budget                the budget planner's plan strings  passes/plan_budget.py
decide                     the Plan (no FX)                   memopt/decide.py
apply_recompute            recompute tags, final partition    passes/apply_recompute.py
offload                    offload/reload ops per the Plan    passes/offload_step.py
=========================  =================================  ===============================

Graph facts (op classes, aliasing, sizes, layers) come from :mod:`memopt.facts`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import facts, kernel_times
from memopt.candidates import SavedActivation
from memopt.config import MemoptConfig, cache_dir
from memopt.decide import Plan, decide, saved_id
from memopt.errors import ConfigError
from memopt.offload.region_layers import layer_slice
from memopt.passes.apply_recompute import apply_recompute_pass
from memopt.passes.cluster_subgraphs import cluster_subgraphs_pass
from memopt.passes.detect_layers import detect_layers_pass
from memopt.passes.find_recompute_subgraphs import (
    ATTENTION_CHANNELS_LAST,
    find_recompute_subgraphs_pass,
)
from memopt.passes.find_saved_activations import find_saved_activations_pass
from memopt.passes.offload_step import offload_step
from memopt.passes.plan_budget import _device, assigned_result, measure_room, plan_budget
from memopt.plan import PlanSpec, Strategy, expand_short_ids, localize
from memopt.planner.chains import MAX_RECOMPUTE_DEPTH, planner_depth
from memopt.step_report import OUTPUT, PER_RUN, SHARED
from memopt.symbolic import SymbolTable, build_symbol_table

log = logging.getLogger("memopt")


@dataclass
class Region:
    """What the passes of one joint graph read and write."""

    joint: torch.fx.GraphModule
    joint_inputs: Sequence[Any]
    config: MemoptConfig
    partition_kwargs: dict[str, Any]
    symbols: SymbolTable
    known_elsewhere: Collection[str] = ()
    held_bytes: int = 0  # activation bytes earlier regions of the step hold (byte budgets)
    cuda_graphs: bool = False  # compiled with CUDA graphs (the budget planner counts their copies)
    activation_inputs: Sequence[int] = ()  # per primal: PER_RUN, SHARED or 0 (no activation)
    # saved activation inputs (before, after the plan): pipeline.saved_inputs
    saved_inputs: tuple[tuple, tuple] = ((), ())
    assigned: Any = None  # memopt.step.Option: the step plan's choice for this region
    # occurrences of each counted plan's cluster in the step's earlier runs (None: plans
    # without a Count); a Count counts over the step (memopt.plan.localize)
    count_offsets: Mapping[str, int] | None = None
    fw: torch.fx.GraphModule | None = None
    bw: torch.fx.GraphModule | None = None
    layers: list[str] = field(default_factory=list)  # the repeated layers (module paths)
    # the model's layers, as offload_layers and the sync dict number them (api._check_layers)
    model_layers: tuple[str, ...] = ()
    # ``layers`` are none of ``model_layers`` (a head's projections, a block's own fragment)
    foreign_layers: bool = False
    frame: str = ""  # the model's path of the module dynamo compiled (detect_layers.frame_prefix)
    groups: list = field(default_factory=list)  # find_saved_activations.SavedGroup
    subgraphs: list = field(default_factory=list)  # find_recompute_subgraphs.Subgraph
    candidates: list[SavedActivation] = field(default_factory=list)
    budget: Any = None  # passes.plan_budget.BudgetResult when a budget was given
    plan: Plan | None = None
    offload: Any = None  # memopt.offload.result.OffloadResult when activations were offloaded
    baseline_saved: sympy.Expr = sympy.Integer(0)  # activation bytes saved without memopt
    final_saved: sympy.Expr = sympy.Integer(0)  # after memopt's plan
    num_joint_nodes: int = 0
    plan_seconds: float = 0.0
    kernels: dict[str, float] = field(default_factory=dict)  # memopt.kernel_times.measure
    # kernels without room to be timed as the region compiled (mid-step, under a byte budget)
    deferred_kernels: dict[str, torch.fx.Node] = field(default_factory=dict)
    # the baseline forward's channels-last input copies, decided once after the partition
    layout: facts.LayoutCopies = field(default_factory=facts.LayoutCopies)

    @property
    def planner_depth(self) -> int:
        """The chain depth the budget and step planners solve this region with, and decide
        applies their plans with (:func:`memopt.planner.chains.planner_depth`)."""
        return planner_depth(len(self.layers))

    @property
    def num_fwd_outputs(self) -> int:
        return self.partition_kwargs["num_fwd_outputs"]

    def partition(self) -> None:
        self.fw, self.bw = compat.min_cut_partition(
            self.joint, self.joint_inputs, **self.partition_kwargs
        )


def saved_input_bytes(
    fw: torch.fx.GraphModule,
    num_fwd_outputs: int,
    flags: Sequence[int],
    symbols: SymbolTable,
    kinds: Collection[int] = (PER_RUN,),
    copied: Collection[torch.fx.Node] = (),
) -> sympy.Expr:
    """Bytes of the graph inputs the forward saves that are activations of earlier regions of
    the step (``flags`` per input, from the backend: :data:`PER_RUN` or :data:`SHARED`, of
    ``kinds``). They are held for this region's backward like its own activations; parameters
    and the user's batch are not. A shared one is counted once per step, not once per run.
    ``copied``: saved inputs Inductor saves channels-last copies of in their place (the
    region's own bytes, :func:`saved_activation_bytes`), not their storages."""
    inputs = [n for n in fw.graph.find_nodes(op="placeholder")]
    act = {n for n, f in zip(inputs, flags) if int(f) in kinds}
    roots = {}
    for n in fw.graph.output_node().args[0][num_fwd_outputs:]:
        if isinstance(n, torch.fx.Node) and n not in copied:
            r = facts.storage_root(n)
            if r in act and facts.tensor_val(r) is not None:
                roots[r] = facts.storage_nbytes_expr(facts.tensor_val(r))
    return symbols.readable(sum(roots.values(), sympy.Integer(0)))


def saved_activation_bytes(
    fw: torch.fx.GraphModule,
    num_fwd_outputs: int,
    symbols: SymbolTable,
    copied: Sequence[torch.fx.Node] | None = None,
) -> sympy.Expr:
    """Symbolic bytes of the activations a forward graph saves (memopt.facts)."""
    return symbols.readable(facts.saved_activation_bytes(fw, num_fwd_outputs, copied))


# --- the passes -----------------------------------------------------------------------------


def detect_layers(r: Region) -> Region:
    # on the joint graph, before any partition: the forward and backward graphs copy the tags
    r.layers = detect_layers_pass(r.joint, r.config.layers, r.model_layers, r.frame)
    r.foreign_layers = bool(r.model_layers and r.layers) and not set(r.layers) & set(r.model_layers)
    return r


def partition(r: Region) -> Region:
    r.partition()
    r.symbols = r.symbols.with_graph(r.fw)
    r.layout = facts.layout_copies(r.fw, r.num_fwd_outputs)
    r.baseline_saved = saved_activation_bytes(r.fw, r.num_fwd_outputs, r.symbols, r.layout.saved)
    r.baseline_saved += saved_input_bytes(
        r.fw, r.num_fwd_outputs, r.activation_inputs, r.symbols, copied=r.layout.saved
    )
    r.saved_inputs = (saved_inputs(r, r.layout.saved), r.saved_inputs[1])
    return r


def saved_inputs(
    r: Region, copied: Collection[torch.fx.Node]
) -> tuple[tuple[int, int, str, sympy.Expr], ...]:
    """The inputs the forward saves that are activations of the step, each (argument index,
    :data:`PER_RUN` or :data:`SHARED`, dtype, bytes), and the outputs it saves (output index,
    :data:`OUTPUT`, dtype, bytes): what the report needs to count once per step one storage
    that several runs save (the runs' storages, memopt.state; an encoder output every decoder
    layer's run saves, which the encoder's run may save too). ``copied``: as in
    :func:`saved_input_bytes` (a convolution's input: its copy is saved, not its storage)."""
    inputs = list(r.fw.graph.find_nodes(op="placeholder"))
    kinds = {n: (i, int(f)) for i, (n, f) in enumerate(zip(inputs, r.activation_inputs)) if f}
    saved = {
        facts.storage_root(n)
        for n in facts.saved_outputs(r.fw, r.num_fwd_outputs)
        if n not in copied
    }
    outs = r.fw.graph.output_node().args[0][: r.num_fwd_outputs]
    for j, n in enumerate(outs):
        root = facts.storage_root(n) if isinstance(n, torch.fx.Node) else None
        if root in saved and root.op != "placeholder" and root not in kinds:
            kinds[root] = (j, OUTPUT)
    out = {}
    for root in saved:
        if root in kinds:
            v = facts.tensor_val(root)
            dtype = str(v.dtype).removeprefix("torch.")
            whole = facts.storage_nbytes_expr if root.op == "placeholder" else facts.nbytes_expr
            out[root] = (*kinds[root], dtype, r.symbols.readable(whole(v)))
    return tuple(sorted(out.values(), key=lambda e: (e[1] == OUTPUT, e[0])))


def find_saved_activations(r: Region) -> Region:
    outs = r.fw.graph.output_node().args[0][r.num_fwd_outputs :]
    names = [n.name for n in outs if isinstance(n, torch.fx.Node)]
    _, r.groups = find_saved_activations_pass(r.joint, names)
    return r


def find_recompute_subgraphs(r: Region) -> Region:
    c = r.config
    _, r.subgraphs = find_recompute_subgraphs_pass(
        r.joint,
        r.groups,
        probe_level=c.probe_level,
        max_nodes=c.max_subgraph_nodes,
        max_matmuls=c.max_subgraph_matmuls,
        attention=not r.layout.channels_last,
    )
    return r


def cluster_subgraphs(r: Region) -> Region:
    _, r.candidates = cluster_subgraphs_pass(r.joint, r.subgraphs, r.symbols, r.layout.if_saved)
    return r


#: devices whose kernels are timed (CPU plans use round rates: memopt.planner.CPU_DEFAULTS)
TIMED_DEVICES = frozenset({"cuda"})


def time_kernels(r: Region) -> Region:
    """The graph's matmuls, attention, convolutions and reductions timed on the device (once
    per signature, cached: memopt.kernel_times), where a plan is priced: a budget, or offload's
    window check. Switched off, every op is priced by the roofline."""
    c = r.config
    if r.assigned is not None or (c.budget is None and not c.offload_layers and not c.sync):
        return r
    device = _device(r.joint_inputs)
    if device.type not in TIMED_DEVICES:
        return r
    value = _value(r)
    where = os.path.join(cache_dir(), "rates")
    room = functools.partial(measure_room, device, c.budget)  # asked only when timing
    r.kernels = kernel_times.measure(
        (r.joint, r.fw, r.bw), device, value, where, room=room, deferred=r.deferred_kernels
    )
    return r


def _value(r: Region):
    return lambda e: r.symbols.evaluate(r.symbols.readable(e))


def plan_budget_pass(r: Region) -> Region:
    if r.assigned is not None:
        a = r.assigned
        r.budget = assigned_result(a.plans, a.sync, f"Step plan for this region: {a.describe()}")
    elif r.config.budget is not None:
        r.budget = plan_budget(
            r.joint,
            r.fw,
            r.bw,
            r.candidates,
            r.symbols,
            r.config,
            r.joint_inputs,
            r.held_bytes,
            plans=_plans(r),
            layout_copies=r.layout.saved,
            kernels=r.kernels,
            max_depth=r.planner_depth,
            deferred=r.deferred_kernels,
            cuda_graphs=r.cuda_graphs,
        )
        kinds, copied = (PER_RUN, SHARED), r.layout.saved
        ins = saved_input_bytes(
            r.fw, r.num_fwd_outputs, r.activation_inputs, r.symbols, kinds, copied
        )
        r.budget.problem = replace(r.budget.problem, saved_input_bytes=r.symbols.evaluate(ins) or 0)
    return r


def _plans(r: Region) -> tuple[PlanSpec, ...]:
    """The user's plans as this run applies them (Counts count over the step; short ids
    resolved against the step's cluster ids)."""
    known = {c.cluster_id for c in r.candidates if c.cluster_id is not None}
    known |= {saved_id(c.root) for c in r.candidates if c.cluster_id is None}
    known |= set(r.known_elsewhere) | set(r.count_offsets or {})
    return localize(expand_short_ids(r.config.plans, known), r.count_offsets or {})


def decide_pass(r: Region) -> Region:
    c, b = r.config, r.budget
    plans = _plans(r)
    if b is not None and r.count_offsets:
        # the step plan's choice for the run, with the user's counted plans where it left off
        mine = {p.cluster_id: p for p in plans if p.cluster_id in r.count_offsets}
        plans = tuple(mine.get(p.cluster_id, p) for p in b.plans)
        plans += tuple(p for cid, p in mine.items() if cid not in {q.cluster_id for q in plans})
    elif b is not None:
        plans = b.plans
    # DDP's graph split cuts the model at bucket bytes, not layers: a region's layers are no
    # model's layers to count the user's offload setting in (the step offloads nothing)
    own = bool(c.offload_k or c.sync)  # the user's setting: it counts the model's layers
    ddp = own and compat.ddp_split_compile()
    # repeated modules that are none of the model's layers (a head's projections after a
    # graph break: Segformer, sweep 4): the user's setting does not count them
    foreign = own and r.foreign_layers
    r.plan = decide(
        r.candidates,
        level=0 if b is not None else c.level,
        plans=plans,
        known_elsewhere=r.known_elsewhere,
        withheld={"Attention": ATTENTION_CHANNELS_LAST} if r.layout.channels_last else None,
        strict=c.strict,
        value=r.symbols.evaluate,
        layer_names=() if ddp or foreign else r.layers,
        layer_slice=layer_slice(r.layers, r.model_layers) if own and not ddp else None,
        offload_layers=c.offload_k,
        # the user's sync dict wins; offload_layers=k takes its default schedule
        sync=dict(c.sync) if c.sync else (b.sync if b and not c.offload_k else None),
        max_depth=MAX_RECOMPUTE_DEPTH if b is None else r.planner_depth,
    )
    if ddp:
        r.plan = replace(r.plan, warnings=(*r.plan.warnings, _DDP_OFFLOAD))
    elif foreign:
        note = _FOREIGN_LAYERS.format(here=_names(r.layers), model=_names(r.model_layers))
        r.plan = replace(r.plan, warnings=(*r.plan.warnings, note))
    return r


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)})"


_FOREIGN_LAYERS = (
    "activation offload: this region's repeated modules ({here}) are none of the model's "
    "layers that offload_layers / sync count ({model}); nothing is offloaded here"
)


_DDP_OFFLOAD = (
    "activation offload: this region is one of DistributedDataParallel's buckets (dynamo's "
    "DDP graph split, torch._dynamo.config.optimize_ddp), which cut the model at bucket bytes, "
    "not at layers, so offload_layers / sync cannot name the model's layers here; nothing is "
    "offloaded. Compile one graph (torch._dynamo.config.optimize_ddp = False), or shard with "
    "FSDP2 (one region per layer), or use a budget (its planner offloads within each region)"
)


def apply_recompute(r: Region) -> Region:
    if any(s in (Strategy.RECOMPUTE, Strategy.COMPROMISE) for s in r.plan.per_root.values()):
        apply_recompute_pass(r.joint, r.candidates, r.plan.per_root)
        r.partition()
    return r


def offload(r: Region) -> Region:
    window = None
    if r.plan.sync:  # of the graphs before the rewrite; advisory: it never stops the compile
        try:
            window = _compute_seconds(r)
        except Exception as e:  # noqa: BLE001
            log.debug("memopt offload: no window check (%s)", e)
    r.offload = offload_step(
        r.fw,
        r.bw,
        plan=r.plan,
        candidates=r.candidates,
        num_fwd_outputs=r.num_fwd_outputs,
        min_bytes=r.config.offload_min_bytes,
    )
    if r.offload is not None:
        r.fw, r.bw = r.offload.fw, r.offload.bw
        if window is not None and r.offload.offloaded:
            r.offload = _window_note(r.offload, *window)
        if r.config.offload_k or r.config.sync:
            r.offload = _nothing_moved_note(r.offload, r.config)
    return r


def _nothing_moved_note(result, config: MemoptConfig):
    """The offload result with a warning when the user's ``offload_layers`` / sync dict moved
    no bytes in this region, saying why (the kept tensors' reasons, most frequent first)."""
    from memopt.offload import units
    from memopt.passes.insert_offload import GATELESS

    if result.offloaded:
        return result
    asked = f"offload_layers={config.offload_k}" if config.offload_k else "the sync dict"
    expected = re.compile(
        "|".join(
            _template_re(t)
            for t in (units.GRAPH_INPUT, units.VIEW_OF_INPUT, units.NO_LAYER, units.UNSCHEDULED)
        )
    )
    small, gateless = re.compile(_template_re(units.TOO_SMALL)), re.compile(_template_re(GATELESS))
    counts: dict[str, int] = {}
    for _i, _name, reason in result.kept:
        if expected.fullmatch(reason):
            continue  # inputs never move, unscheduled layers were not asked for
        if small.fullmatch(reason):
            reason = f"fewer bytes than min_bytes={config.offload_min_bytes}"
        reason = re.sub(r"\blayer \d+\b", "layer N", reason)
        counts[reason] = counts.get(reason, 0) + 1
    if not counts:
        return result  # the scheduled layers saved nothing of their own here
    reasons = sorted(counts.items(), key=lambda kv: -kv[1])
    said = "; ".join(f"{n} saved tensor(s): {why}" for why, n in reasons[:3])
    hint = ""
    if any(gateless.fullmatch(why.replace("layer N", "layer 0")) for why in counts):
        hint = " Use a budget or level= recompute for such layers instead."
    elif any(why.startswith("fewer bytes than") for why in counts):
        hint = " A smaller offload_min_bytes lets smaller tensors move."
    note = f"{asked} offloaded nothing in this region: {said}.{hint}"
    log.warning("memopt offload: %s", note)
    return replace(result, notes=(*result.notes, note))


def _template_re(template: str) -> str:
    """A regex matching ``template`` with each ``{field}`` filled in."""
    parts = re.split(r"\{\w+\}", template)
    return ".+".join(re.escape(p) for p in parts)


def _compute_seconds(r: Region):
    """Predicted forward and backward seconds (measured kernels, the rest roofline op times)
    and the device's copy rates, for CUDA graphs; None elsewhere (CPU copies are synchronous
    anyway)."""
    from memopt.passes.build_planning_problem import Sizes, op_cost
    from memopt.passes.plan_budget import device_rates
    from memopt.planner.costs import op_s

    device = _device([n.meta.get("val") for n in r.fw.graph.find_nodes(op="placeholder")])
    if device.type != "cuda":
        return None
    rates = device_rates(device, r.config.budget)
    value = _value(r)
    sizes = Sizes(value, kernel_s=kernel_times.lookup(r.kernels, value))

    def seconds(gm: torch.fx.GraphModule) -> float:
        nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        return sum(op_s(op_cost(n, sizes), rates) for n in nodes)

    return seconds(r.fw), seconds(r.bw), rates


def _window_note(result, fwd_s: float, bwd_s: float, rates):
    """The offload result with a note when its copies cannot hide behind the step."""
    from memopt.offload.window import OffloadWindow

    window = OffloadWindow(
        nbytes=result.total_bytes(),
        layers=len(result.bytes_per_layer()),
        fwd_s=fwd_s,
        bwd_s=bwd_s,
        d2h_bytes_per_s=rates.d2h_bytes_per_s,
        h2d_bytes_per_s=rates.h2d_bytes_per_s,
    )
    note = window.note()
    if note is None:
        return result
    log.warning("memopt offload: %s", note)
    return replace(result, notes=(*result.notes, note))


Pass = Callable[[Region], Region]

#: The passes in order: (name, function). Names are what ``disable_passes`` takes.
PASSES: tuple[tuple[str, Pass], ...] = (
    ("detect_layers", detect_layers),
    ("partition", partition),
    ("find_saved_activations", find_saved_activations),
    ("find_recompute_subgraphs", find_recompute_subgraphs),
    ("cluster_subgraphs", cluster_subgraphs),
    ("time_kernels", time_kernels),
    ("plan_budget", plan_budget_pass),
    ("decide", decide_pass),
    ("apply_recompute", apply_recompute),
    ("offload", offload),
)
PASS_NAMES = tuple(name for name, _ in PASSES)
#: Passes the others cannot do without.
REQUIRED = frozenset({"partition", "decide"})


def check_disabled(names: Collection[str]) -> None:
    unknown = sorted(set(names) - set(PASS_NAMES))
    if unknown:
        raise ConfigError(
            f"disable_passes: unknown pass name(s) {', '.join(unknown)}; "
            f"the passes are {', '.join(PASS_NAMES)}"
        )
    required = sorted(set(names) & REQUIRED)
    if required:
        raise ConfigError(f"disable_passes: {', '.join(required)} cannot be switched off")


def run_passes(region: Region, passes: Sequence[tuple[str, Pass]] = PASSES) -> Region:
    """Run ``passes`` in order on ``region``: skip the disabled ones, check each return, lint
    the graphs it leaves, time and log it."""
    disabled = set(region.config.disable_passes)
    check_disabled(disabled)
    level = logging.INFO if region.config.debug else logging.DEBUG
    for name, fn in passes:
        if name in disabled:
            log.log(level, "memopt pass %s: switched off", name)
            continue
        n0, t0 = len(region.joint.graph.nodes), time.perf_counter()
        out = fn(region)
        if not isinstance(out, Region):
            raise TypeError(f"memopt pass {name} returned {type(out).__name__}, not a Region")
        region = out
        for gm in (region.joint, region.fw, region.bw):
            if gm is not None:
                gm.graph.lint()
        dt = time.perf_counter() - t0
        log.log(
            level,
            "memopt pass %s: %.1f ms, joint nodes %d -> %d",
            name,
            1e3 * dt,
            n0,
            len(region.joint.graph.nodes),
        )
    return region


def run_pipeline(
    gm: torch.fx.GraphModule,
    joint_inputs: Sequence[Any],
    config: MemoptConfig,
    partition_kwargs: dict[str, Any],
    *,
    known_elsewhere: Collection[str] = (),
    held_bytes: int = 0,
    assigned: Any = None,
    activation_inputs: Sequence[int] = (),
    count_offsets: Mapping[str, int] | None = None,
    model_layers: Sequence[str] = (),
    frame: str = "",
    cuda_graphs: bool = False,
) -> Region:
    """Run every pass on one joint graph; the returned Region holds the final forward and
    backward graphs, the Plan and what the report reads. ``held_bytes`` and ``assigned`` come
    from the step (:mod:`memopt.state`): what earlier regions hold, and the plan the step
    planner chose for this region."""
    t0 = time.perf_counter()
    region = Region(
        joint=gm,
        joint_inputs=joint_inputs,
        config=config,
        partition_kwargs=partition_kwargs,
        symbols=build_symbol_table(joint_inputs),
        known_elsewhere=known_elsewhere,
        held_bytes=held_bytes,
        assigned=assigned,
        activation_inputs=activation_inputs,
        count_offsets=count_offsets,
        model_layers=tuple(model_layers),
        frame=frame,
        cuda_graphs=cuda_graphs,
    )
    region = run_passes(region)
    fw, n = region.fw, region.num_fwd_outputs
    copied = facts.layout_copied_inputs(fw, n)  # the final forward's, decided once
    region.final_saved = saved_activation_bytes(fw, n, region.symbols, copied)
    region.final_saved += saved_input_bytes(
        fw, n, region.activation_inputs, region.symbols, copied=copied
    )
    region.saved_inputs = (region.saved_inputs[0], saved_inputs(region, copied))
    region.num_joint_nodes = len(gm.graph.nodes)
    region.plan_seconds = time.perf_counter() - t0
    return region
