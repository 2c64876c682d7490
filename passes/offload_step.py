"""offload_step: apply the Plan's activation offload to the partitioned graphs.

Reads only the :class:`memopt.decide.Plan` (its sync dict, ``offload_layers`` and the
strategy-3 tensors), the forward/backward graphs (layers tagged on the joint graph by
detect_layers_pass, carried over by the partitioner) and the candidates (to find a tensor's
aliases among the saved outputs). With ``offload_layers=k`` every saved activation of the
scheduled layers goes; otherwise only the strategy-3 tensors, on the plan's schedule. So a
frozen budget plan (its plan strings and sync dict) offloads exactly what the planner chose.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.fx

from memopt.candidates import SavedActivation
from memopt.decide import Plan
from memopt.offload.result import OffloadResult
from memopt.passes.insert_offload import insert_offload_pass
from memopt.plan import Strategy


def offloaded_outputs(
    fw: torch.fx.GraphModule,
    num_fwd_outputs: int,
    plan: Plan,
    candidates: Sequence[SavedActivation],
) -> list[int] | None:
    """Indices among the saved outputs of the tensors the plan offloads (None: every saved
    tensor of the scheduled layers, ``offload_layers=k``)."""
    if plan.offload_layers:
        return None
    chosen_roots = {r for r, s in plan.per_root.items() if s == Strategy.OFFLOAD}
    chosen = {m for c in candidates if c.root in chosen_roots for m in (c.root, *c.members)}
    outs = fw.graph.output_node().args[0][num_fwd_outputs:]
    return [i for i, o in enumerate(outs) if isinstance(o, torch.fx.Node) and o.name in chosen]


def offload_step(
    fw: torch.fx.GraphModule,
    bw: torch.fx.GraphModule,
    *,
    plan: Plan,
    candidates: Sequence[SavedActivation],
    num_fwd_outputs: int,
    min_bytes: int,
) -> OffloadResult | None:
    if not plan.sync:
        return None
    return insert_offload_pass(  # its SyncErrors are ConfigErrors that name the setting
        fw,
        bw,
        sync=plan.sync,
        num_fwd_outputs=num_fwd_outputs,
        num_layers=plan.num_layers,
        min_bytes=min_bytes,
        saved_indices_to_offload=offloaded_outputs(fw, num_fwd_outputs, plan, candidates),
    )
