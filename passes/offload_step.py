"""offload_step: choose which saved tensors to offload and run insert_offload_pass.

Reads the settings (``offload_layers``, ``sync``) and the strategy-3 decisions (plan strings
``Cluster:3:N``), the partitioned forward/backward graphs and the detected layers. With
``offload_layers=k``, or ``sync`` alone, every saved activation of the offloaded layers goes;
with strategy-3 plans only those clusters' tensors go, under ``sync`` or, if none, the default
dict for ``n-1`` layers (every layer but the last, whose backward comes right after its
forward). So a frozen budget plan (its plan strings and sync dict) offloads exactly what the
planner chose.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch.fx

from memopt.candidates import Candidate
from memopt.config import MemoptConfig
from memopt.errors import ConfigError
from memopt.offload.result import OffloadResult
from memopt.offload.sync import SyncEntry, SyncError, default_sync
from memopt.passes.detect_layers import detect_layers_pass
from memopt.passes.insert_offload import insert_offload_pass
from memopt.plan import Strategy

log = logging.getLogger("memopt")


def wants_offload(
    config: MemoptConfig, per_root: Mapping[str, Strategy], planned: PlannedOffload | None = None
) -> bool:
    return (
        bool(config.offload_layers)
        or bool(config.sync)
        or Strategy.OFFLOAD in per_root.values()
        or bool(planned and planned.roots)
    )


@dataclass(frozen=True)
class PlannedOffload:
    """What the budget planner chose to offload (candidate roots, its own ids included) and
    the sync dict it planned them with."""

    roots: frozenset[str]
    sync: Mapping[int, SyncEntry]

    @classmethod
    def from_solution(cls, solution) -> PlannedOffload | None:
        roots = frozenset(n for n, s in solution.decisions.items() if s == Strategy.OFFLOAD)
        if not roots or not solution.sync:
            return None
        return cls(roots, dict(solution.sync))


def offload_step(
    fw: torch.fx.GraphModule,
    bw: torch.fx.GraphModule,
    *,
    config: MemoptConfig,
    num_fwd_outputs: int,
    candidates: Sequence[Candidate],
    per_root: Mapping[str, Strategy],
    planned: PlannedOffload | None = None,
) -> OffloadResult | None:
    names = detect_layers_pass(fw, config.layers)
    detect_layers_pass(bw, config.layers)
    n = len(names)
    if n == 0:
        # A graph without layers (e.g. the loss after a graph break) has nothing to offload;
        # the report's offload section stays empty for it.
        log.warning(
            "memopt offload: no repeated layers in this compiled graph (children of a "
            "ModuleList/Sequential such as model.layers.3); nothing offloaded here. If the "
            "model has layers under another path, pass layers='<module path prefix>'."
        )
        return None
    try:
        if config.sync:
            sync = {k: v for k, v in config.sync}
        elif planned is not None and not config.offload_layers:
            sync = dict(planned.sync)  # the schedule the planner's predictions assume
        elif config.offload_layers:
            if config.offload_layers >= n:
                raise ConfigError(
                    f"offload_layers={config.offload_layers} must be below the number of layers "
                    f"({n}: {names[0]} .. {names[-1]})"
                )
            sync = default_sync(n, config.offload_layers)
        else:
            sync = default_sync(n, n - 1)
    except SyncError as e:
        raise ConfigError(f"sync: {e}") from None
    indices = None
    if (
        not (config.offload_layers or config.sync)
        or Strategy.OFFLOAD in per_root.values()
        or planned is not None
    ):
        offloaded = {r for r, s in per_root.items() if s == Strategy.OFFLOAD}
        if planned is not None:
            offloaded |= planned.roots  # also saved tensors without a cluster id (Saved_<name>+)
        chosen = {m for c in candidates if c.root in offloaded for m in (c.root, *c.members)}
        outs = fw.graph.output_node().args[0][num_fwd_outputs:]
        indices = [
            i for i, o in enumerate(outs) if isinstance(o, torch.fx.Node) and o.name in chosen
        ]
        if config.offload_layers:
            indices = None  # offload_layers=k takes every saved tensor of those layers
        # with strategy-3 plans (or the planner's choice), a sync dict only schedules them
    try:
        return insert_offload_pass(
            fw,
            bw,
            sync=sync,
            num_fwd_outputs=num_fwd_outputs,
            num_layers=n,
            min_bytes=config.offload_min_bytes,
            saved_indices_to_offload=indices,
        )
    except SyncError as e:
        raise ConfigError(f"sync: {e}") from None
