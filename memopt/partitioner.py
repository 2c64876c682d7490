"""memopt's Inductor partitioner hook and the per-model state that collects region reports.

``MemoptPartitioner`` is a ``CustomPartitionerFn``: Inductor calls it with the joint graph
instead of its default min-cut partition. Its ``uuid()`` encodes memopt's version and the
resolved settings, so a warm FX/AOTAutograd cache never serves a graph planned with other
settings. A cache hit skips the partitioner entirely; :class:`MemoptState` then reloads the
region's report persisted under the cache dir, keyed by the dynamo graph and the uuid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt.config import MemoptConfig, cache_dir
from memopt.errors import PlanError
from memopt.report import RegionReport, Report

log = logging.getLogger("memopt")


class MemoptState:
    """Regions compiled for one optimized model (or for the ``"memopt"`` backend)."""

    def __init__(self, config: MemoptConfig):
        self.config = config
        self.regions: list[RegionReport] = []
        self._lock = threading.Lock()
        self._pending_key: str | None = None
        self._ran = False
        self.param_handle: Any = None  # memopt.params.FsdpOffload when param_offload

    def known_cluster_ids(self) -> set[str]:
        return {c["cluster_id"] for r in self.regions for c in r.clusters}

    def report(self, optimizer: Any = None) -> Report:
        rows: list[dict] = []
        if self.param_handle is not None or optimizer is not None:
            from memopt.params import placement_rows

            rows = placement_rows(self.param_handle, optimizer)
        return Report(self.config, list(self.regions), placement=rows)

    # --- persistence for warm compile caches -------------------------------------------------
    def begin_region(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        h = hashlib.sha256()
        h.update(self.config.uuid().encode())
        h.update(torch.__version__.encode())
        h.update(gm.code.encode())
        for x in example_inputs:
            if isinstance(x, torch.Tensor):
                h.update(f"{tuple(x.shape)}{x.dtype}{x.requires_grad}".encode())
            else:
                h.update(repr(type(x)).encode())
        self._pending_key = h.hexdigest()[:32]
        self._ran = False

    def add_region(self, region: RegionReport) -> None:
        with self._lock:
            region.index = len(self.regions)
            self.regions.append(region)
            self._ran = True
        if self._pending_key is not None:
            self._store(self._pending_key, region)

    def end_region(self) -> None:
        """After compile_fx returned: if the partitioner did not run (cache hit), reload."""
        key, self._pending_key = self._pending_key, None
        if self._ran or key is None:
            return
        region = self._load(key)
        if region is None:
            log.warning(
                "memopt: a compile-cache hit skipped the partitioner and no stored report was "
                "found for this graph; the plan was applied but the report lacks this region"
            )
            return
        region.from_cache = True
        with self._lock:
            region.index = len(self.regions)
            self.regions.append(region)

    def _path(self, key: str) -> str:
        return os.path.join(cache_dir(), "reports", f"{key}.json")

    def _store(self, key: str, region: RegionReport) -> None:
        try:
            path = self._path(key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(region.to_dict(), f)
            os.replace(tmp, path)
        except OSError as e:  # a read-only home must not break training
            log.debug("memopt: could not persist the region report: %s", e)

    def _load(self, key: str) -> RegionReport | None:
        try:
            with open(self._path(key)) as f:
                return RegionReport.from_dict(json.load(f))
        except (OSError, ValueError, TypeError):
            return None


class MemoptPartitioner(compat.CustomPartitionerFn):
    """Tag the joint graph per memopt's plan, then run Inductor's min-cut partition."""

    def __init__(self, config: MemoptConfig, state: MemoptState):
        self.config = config
        self.state = state

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any):
        from memopt.passes.pipeline import run_pipeline

        try:
            result = run_pipeline(
                gm,
                joint_inputs,
                self.config,
                kwargs,
                known_elsewhere=self.state.known_cluster_ids(),
            )
        except PlanError:
            raise
        region = RegionReport.from_pipeline(0, result)
        for w in region.warnings:
            log.warning("memopt: %s", w)
        self.state.add_region(region)
        if log.isEnabledFor(logging.INFO):
            log.info("memopt plan (region %d):\n%s", region.index, self.state.report().table())
        return result.fw, result.bw

    def uuid(self) -> str:
        return self.config.uuid()

    def __reduce__(self):
        # Inductor pickles its config into cache keys: the uuid is the stable identity.
        return (str, (self.uuid(),))

    def __deepcopy__(self, memo: dict) -> MemoptPartitioner:
        # Inductor deep-copies its config; the partitioner shares its state on purpose.
        return self
