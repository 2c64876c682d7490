"""Agreement between the ranks of a process group.

Under FSDP2 at world size > 1 every rank runs memopt on its own. What memopt decides from
measurements (the device's rates, a step's measured peaks and allocated bytes) would differ
by a few bytes or percent between ranks, and so could the plans. memopt agrees on those
measurements before deciding (rank 0's device rates; the largest of each measured byte
count), so every rank then solves the same problem and makes the same plan: identical by
construction, with no plan sent between ranks.

Collectives are called only where every rank is by construction: in ``memopt.optimize`` and
at the boundary of a training step (SPMD: every rank runs the same regions in the same order).
Inside a compile (a rank may compile alone, and a collective there could hang) rank 0 publishes
what it measured in the process group's key-value store and the other ranks wait for the keys
(:func:`publish`, :func:`from_store`): no shared file system and no common cache dir needed.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("memopt")


def world_size() -> int:
    """The default process group's size; 1 without one."""
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def _device() -> torch.device:
    """Where the default group's collectives take their tensors: the CPU when it has a CPU
    backend (gloo: no wait for the GPU's queue), else the current CUDA device (NCCL)."""
    backend = str(dist.get_backend()).lower()
    if "gloo" in backend or "nccl" not in backend or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def agree_max(values: Sequence[int], dtype: torch.dtype = torch.int64) -> list:
    """The element-wise maximum of ``values`` over the ranks (every rank passes as many):
    ints by default, floats with ``dtype=torch.float64``."""
    if world_size() == 1:
        return list(values)
    t = torch.tensor(list(values), dtype=dtype, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def agree_step(
    probed: int | None,
    record: int | None,
    compiled: bool,
    entry: Sequence[int],
    bwd_entry: Mapping[int, int],
    runs: Sequence[int] | None = None,
    start: int | None = None,
) -> tuple[Any, ...]:
    """A step's measurements (the probed peak, a new peak record, whether a region compiled
    during it, the bytes allocated as each run and each run's backward began, each run's probed
    peak, the bytes allocated as the next step begins), each the largest over the ranks that
    have it, so that the ranks make the same step plan; returned in that order. Raises when the
    ranks ran different numbers of region runs."""
    n = len(entry)
    most, neg_least = agree_max([n, -n])
    if most != -neg_least:
        raise RuntimeError(
            f"memopt: the ranks ran different steps ({-neg_least} to {most} region runs); "
            "step plans need every rank to run the same regions in the same order"
        )
    bwd = [bwd_entry.get(i, -1) for i in range(n)]
    mine = [-1 if v is None else v for v in (probed, record, start)]
    per_run = list(runs) if runs is not None and len(runs) == n else [-1] * n
    agreed = agree_max([*mine, int(compiled), *entry, *bwd, *per_run])
    probed, record, begun = (None if v < 0 else v for v in agreed[:3])
    comp, rest = agreed[3], agreed[4:]
    back = {i: v for i, v in enumerate(rest[n : 2 * n]) if v >= 0}
    peaks = tuple(rest[2 * n :]) if n and min(rest[2 * n :]) >= 0 else None
    return probed, record, bool(comp), tuple(rest[:n]), back, peaks, begun


def from_rank0(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (picklable)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=_device())
    return box[0]


def store() -> Any:
    """The default process group's key-value store; None without a group or a store."""
    from memopt import _torch_compat as compat

    if world_size() == 1:
        return None
    try:
        return compat.default_store()
    except (RuntimeError, ValueError, AttributeError) as e:
        if not _no_store_warned:
            _no_store_warned.append(True)
            log.warning("memopt: no process-group store (%s): each rank measures for itself", e)
        return None


_no_store_warned: list[bool] = []  # the warning above, once per process


def publish(items: Mapping[str, Any]) -> None:
    """Rank 0: ``key -> value`` (JSON) into the store for the other ranks."""
    st = store()
    for k, v in items.items() if st is not None else ():
        st.set(k, json.dumps(v))


def from_store(keys: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """What rank 0 published under ``keys``, waiting up to ``timeout_s`` for them; the keys
    that did not come are left out (the caller says what that means)."""
    st = store()
    if st is None:
        return {}
    try:
        st.wait(list(keys), datetime.timedelta(seconds=timeout_s))
    except RuntimeError:  # timed out (DistStoreError): take what came
        pass
    return {k: json.loads(st.get(k)) for k in keys if st.check([k])}
