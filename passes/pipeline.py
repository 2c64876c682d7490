"""The memopt pass pipeline, in order. Called by the partitioner on each joint graph.

=====  ===============================  =================================================
step   pass                              file
=====  ===============================  =================================================
1      baseline min-cut partition        memopt/_torch_compat.py (torch's partitioner)
2      find_saved_activations_pass      passes/find_saved_activations.py
3      find_recompute_subgraphs_pass    passes/find_recompute_subgraphs.py
4      detect_layers_pass               passes/detect_layers.py
5      cluster_subgraphs_pass           passes/cluster_subgraphs.py
6      plan_budget (with a budget)      passes/plan_budget.py -> memopt/planner (no FX)
7      decide (plain data, no FX)       memopt/decide.py
8      apply_recompute_pass             passes/apply_recompute.py
9      final min-cut partition           memopt/_torch_compat.py
10     offload_step -> insert_offload   passes/offload_step.py, passes/insert_offload.py
=====  ===============================  =================================================

Steps 2-5 only annotate (``node.meta``) and return plain data; step 6 decides; step 7 is the
only rewrite of the joint graph. Each pass can be switched off by name (``disabled=``), its
return is checked and ``graph.lint()`` runs after it; with ``MEMOPT_DEBUG=1`` each pass's time
and node-count change are logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk
from memopt.candidates import Candidate
from memopt.config import MemoptConfig
from memopt.decide import Decisions, decide
from memopt.passes.apply_recompute import apply_recompute_pass
from memopt.passes.cluster_subgraphs import cluster_subgraphs_pass
from memopt.passes.detect_layers import detect_layers_pass
from memopt.passes.find_recompute_subgraphs import find_recompute_subgraphs_pass
from memopt.passes.find_saved_activations import find_saved_activations_pass, storage_root
from memopt.passes.offload_step import PlannedOffload, offload_step, wants_offload
from memopt.passes.plan_budget import plan_budget
from memopt.symbolic import SymbolTable, build_symbol_table, tensor_bytes_expr

log = logging.getLogger("memopt")

PASS_NAMES = (
    "find_saved_activations",
    "find_recompute_subgraphs",
    "cluster_subgraphs",
    "apply_recompute",
)


@dataclass
class PipelineResult:
    fw: torch.fx.GraphModule
    bw: torch.fx.GraphModule
    symbols: SymbolTable
    candidates: list[Candidate]
    decisions: Decisions
    baseline_saved: sympy.Expr  # activation bytes saved for backward without memopt
    final_saved: sympy.Expr  # after memopt's decisions
    layers: list[str]  # the repeated layers detected (module paths)
    budget: Any  # passes.plan_budget.BudgetResult when a budget was given
    offload: Any  # memopt.offload.result.OffloadResult when activations were offloaded
    num_joint_nodes: int
    plan_seconds: float


def saved_activation_bytes(
    fw: torch.fx.GraphModule, num_fwd_outputs: int, symbols: SymbolTable
) -> sympy.Expr:
    """Symbolic bytes of the activations a forward graph saves (unique storages, no inputs)."""
    outs = fw.graph.output_node().args[0]
    roots = {}
    for n in outs[num_fwd_outputs:]:
        if not isinstance(n, torch.fx.Node) or n.op == "placeholder":
            continue
        r = storage_root(n)
        if r.op == "placeholder" or not isinstance(r.meta.get(mk.TORCH_VAL), torch.Tensor):
            continue
        roots[r] = tensor_bytes_expr(r.meta[mk.TORCH_VAL])
    return symbols.readable(sum(roots.values(), sympy.Integer(0)))


def _saved_names(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    outs = fw.graph.output_node().args[0]
    return [n.name for n in outs[num_fwd_outputs:] if isinstance(n, torch.fx.Node)]


class _Step:
    def __init__(self, config: MemoptConfig, gm: torch.fx.GraphModule, disabled: Collection[str]):
        self.config, self.gm, self.disabled = config, gm, set(disabled)

    def run(self, name: str, fn, *args: Any, **kwargs: Any):
        if name in self.disabled:
            return None
        n0, t0 = len(self.gm.graph.nodes), time.perf_counter()
        result = fn(self.gm, *args, **kwargs)
        gm = result[0] if isinstance(result, tuple) else result
        if not isinstance(gm, torch.fx.GraphModule):
            raise TypeError(f"memopt pass {name} returned {type(gm).__name__}, not a GraphModule")
        gm.graph.lint()
        if self.config.debug:
            log.info(
                "memopt pass %s: %.1f ms, nodes %d -> %d",
                name,
                1e3 * (time.perf_counter() - t0),
                n0,
                len(gm.graph.nodes),
            )
        return result


def run_pipeline(
    gm: torch.fx.GraphModule,
    joint_inputs: Sequence[Any],
    config: MemoptConfig,
    partition_kwargs: dict[str, Any],
    *,
    known_elsewhere: Collection[str] = (),
    disabled: Collection[str] = (),
) -> PipelineResult:
    t0 = time.perf_counter()
    nfw = partition_kwargs["num_fwd_outputs"]
    symbols = build_symbol_table(joint_inputs)
    fw, bw = compat.min_cut_partition(gm, joint_inputs, **partition_kwargs)
    baseline = saved_activation_bytes(fw, nfw, symbols)
    step = _Step(config, gm, disabled)

    groups = []
    r = step.run("find_saved_activations", find_saved_activations_pass, _saved_names(fw, nfw))
    if r is not None:
        groups = r[1]
    subgraphs = []
    r = step.run(
        "find_recompute_subgraphs",
        find_recompute_subgraphs_pass,
        groups,
        probe_level=config.probe_level,
        max_nodes=config.max_subgraph_nodes,
        max_matmuls=config.max_subgraph_matmuls,
    )
    if r is not None:
        subgraphs = r[1]
    layers: list[str] = []
    if "detect_layers" not in disabled:
        layers = detect_layers_pass(gm, config.layers)
    candidates: list[Candidate] = []
    r = step.run("cluster_subgraphs", cluster_subgraphs_pass, subgraphs, symbols)
    if r is not None:
        candidates = r[1]
    plans, level, budget = config.plans, config.level, None
    if config.budget is not None and "plan_budget" not in disabled:
        detect_layers_pass(fw, config.layers)
        detect_layers_pass(bw, config.layers)
        budget = plan_budget(gm, fw, bw, candidates, symbols, config, joint_inputs)
        plans, level = budget.plans, 0
    decisions = decide(
        candidates,
        level=level,
        plans=plans,
        known_elsewhere=known_elsewhere,
        strict=config.strict,
        value=symbols.evaluate,
    )
    if any(s in (1, 2) for s in decisions.per_root.values()):
        if step.run("apply_recompute", apply_recompute_pass, candidates, decisions.per_root):
            fw, bw = compat.min_cut_partition(gm, joint_inputs, **partition_kwargs)
    final = saved_activation_bytes(fw, nfw, symbols)
    offload = None
    planned = PlannedOffload.from_solution(budget.solution) if budget is not None else None
    if "offload" not in disabled and wants_offload(config, decisions.per_root, planned):
        offload = offload_step(
            fw,
            bw,
            config=config,
            num_fwd_outputs=nfw,
            candidates=candidates,
            per_root=decisions.per_root,
            planned=planned,
        )
        if offload is not None:
            fw, bw = offload.fw, offload.bw
    return PipelineResult(
        fw=fw,
        bw=bw,
        symbols=symbols,
        candidates=candidates,
        decisions=decisions,
        baseline_saved=baseline,
        final_saved=final,
        layers=layers,
        budget=budget,
        offload=offload,
        num_joint_nodes=len(gm.graph.nodes),
        plan_seconds=time.perf_counter() - t0,
    )
