"""memopt's Inductor partitioner hook.

``MemoptPartitioner`` is a ``CustomPartitionerFn``: Inductor calls it with the joint graph
instead of its default min-cut partition. Its ``uuid()`` encodes memopt's version, the
resolved settings and what the step gives this region (the bytes earlier regions hold under a
byte budget, the step plan's choice), so a warm FX/AOTAutograd cache never serves a graph
planned otherwise. A cache hit skips the partitioner entirely;
:class:`memopt.state.MemoptState` then reloads the region's report persisted under the cache
dir, keyed by the dynamo graph and the same context.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt.config import MemoptConfig
from memopt.errors import PlanError
from memopt.report import RegionReport
from memopt.state import MemoptState

__all__ = ["MemoptPartitioner", "MemoptState"]

log = logging.getLogger("memopt")


class MemoptPartitioner(compat.CustomPartitionerFn):
    """Tag the joint graph per memopt's plan, then run Inductor's min-cut partition."""

    def __init__(
        self,
        config: MemoptConfig,
        state: MemoptState,
        *,
        held_bytes: int = 0,
        assigned: Any = None,
        activation_inputs: Sequence[bool] = (),
        count_offsets: Mapping[str, int] | None = None,
        guarded: bool = False,
        frame: str = "",
    ):
        self.config = config
        self.state = state
        self.held_bytes = held_bytes if isinstance(config.budget, int) else 0
        self.assigned = assigned  # memopt.step.Option from the step plan
        self.activation_inputs = tuple(activation_inputs)
        # occurrences of counted plans' clusters in the step's earlier runs
        self.count_offsets = None if count_offsets is None else dict(sorted(count_offsets.items()))
        self.guarded = guarded  # compiled again with the fusion guard (fusion_guard="auto")
        self.frame = frame  # the model's path of the compiled frame's module (detect_layers)

    def context(self) -> str:
        """What the step gives this region, for cache keys ('' when nothing)."""
        counts = f"|counted={self.count_offsets}" if self.count_offsets else ""
        counts += "|guarded" if self.guarded else ""
        counts += "|cudagraphs" if self.state.cuda_graphs else ""  # their copies are planned
        if self.assigned is not None:
            a = self.assigned
            sync = sorted((int(k), tuple(v)) for k, v in a.sync.items())
            return f"assigned={sorted(a.plans)}|sync={sync}{counts}"
        return (f"held={self.held_bytes}" if self.held_bytes else "") + counts

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any):
        from memopt.passes.build_planning_problem import donated_saved
        from memopt.passes.pipeline import run_pipeline

        try:
            result = run_pipeline(
                gm,
                joint_inputs,
                self.config,
                kwargs,
                known_elsewhere=self.state.known_cluster_ids(),
                held_bytes=self.held_bytes,
                assigned=self.assigned,
                activation_inputs=self.activation_inputs,
                count_offsets=self.count_offsets,
                model_layers=self.state.model_layers,
                frame=self.frame,
                cuda_graphs=self.state.cuda_graphs,
            )
        except PlanError:
            raise
        region = RegionReport.from_pipeline(0, result)
        # saved tensors AOTAutograd donates to this backward: a kept graph cannot run it twice
        region.extra["donated_saved"] = len(donated_saved(result.fw, result.bw))
        for w in region.warnings:
            log.warning("memopt: %s", w)
        b = result.budget
        self.state.add_region(
            region, b.problem if b is not None else None, b.retime if b is not None else None
        )
        if log.isEnabledFor(logging.INFO):
            log.info("memopt plan (region %d):\n%s", region.index, self.state.report().table())
        return result.fw, result.bw

    def uuid(self) -> str:
        ctx = self.context()
        if not ctx:
            return self.config.uuid()
        return f"{self.config.uuid()}-{hashlib.sha256(ctx.encode()).hexdigest()[:16]}"

    def __reduce__(self):
        # Inductor pickles its config into cache keys: the uuid is the stable identity.
        return (str, (self.uuid(),))

    def __deepcopy__(self, memo: dict) -> MemoptPartitioner:
        # Inductor deep-copies its config; the partitioner shares its state on purpose.
        return self
