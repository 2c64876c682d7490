"""Region reports kept on disk by the hash of their graph, so that a compile-cache hit (which
skips memopt's partitioner and Inductor's code generation) still has its region's report."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
from collections.abc import Sequence
from typing import Any

import torch

from memopt.config import cache_dir, write_atomic
from memopt.report import RegionReport

log = logging.getLogger("memopt")


def graph_key(config_uuid: str, context: str, code: str, example_inputs: Sequence[Any]) -> str:
    """The key a region's report is stored under: memopt's settings, the compile's context,
    torch's version, the graph's code and its inputs' shapes, dtypes and grad flags."""
    h = hashlib.sha256()
    for part in (config_uuid, context, torch.__version__, code):
        h.update(part.encode())
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            h.update(f"{tuple(x.shape)}{x.dtype}{x.requires_grad}".encode())
        else:
            h.update(repr(type(x)).encode())
    return h.hexdigest()[:32]


def _path(key: str, suffix: str = "json") -> str:
    return os.path.join(cache_dir(), "reports", f"{key}.{suffix}")


def store(key: str, region: RegionReport, problem: Any = None) -> None:
    """Keep ``region`` (and the planner's ``problem`` when given) under ``key``."""
    try:
        write_atomic(_path(key), json.dumps(region.to_dict()))
    except (OSError, TypeError) as e:  # a read-only home must not break training
        log.debug("memopt: could not persist the region report: %s", e)
        return
    if problem is not None:
        store_problem(key, problem)


def store_problem(key: str, problem: Any) -> None:
    """Keep the planner's problem under ``key`` (again for a region re-priced after its
    compile: a warm cache then plans the step from the same prices)."""
    try:
        write_atomic(_path(key, "problem.pkl"), pickle.dumps(problem))
    except (OSError, pickle.PicklingError, TypeError) as e:
        log.debug("memopt: could not persist the region's problem: %s", e)


def load(key: str) -> tuple[RegionReport | None, Any]:
    """The report and problem kept under ``key`` (None for what is not there)."""
    try:
        with open(_path(key)) as f:
            region = RegionReport.from_dict(json.load(f))
    except (OSError, ValueError, TypeError):
        return None, None
    try:
        with open(_path(key, "problem.pkl"), "rb") as f:
            problem = pickle.load(f)  # noqa: S301 - memopt's own cache dir
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError):
        problem = None
    return region, problem
