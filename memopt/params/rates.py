"""Host rates for sizing the placement: pinned PCIe copies and the CPU AdamW, measured once.

    h2d_Bps, d2h_Bps   pinned copies of ``nbytes`` to and from the device (inf without one)
    adam_Bps           torch's fused CPU AdamW, 28 B of state traffic per fp32 parameter,
                       timed while the pinned copies run beside it (as in a training step,
                       where FSDP2's copies share the host's memory bandwidth)

Measured per host, device and torch version, and kept in ``<memopt cache dir>/host_rates.json``
(``MEMOPT_CACHE_DIR``); :func:`host_rates` reads it back. Tests and machines without a device
pass a :class:`HostRates` instead.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, replace

import torch

from memopt.config import write_atomic
from memopt.params.host_plan import ADAMW_TRAFFIC_PER_PARAM_BYTE


@dataclass(frozen=True)
class HostRates:
    """Bytes per second; ``math.inf`` for copies when there is no device to copy to."""

    adam_Bps: float
    """CPU AdamW state traffic per second (28 B per fp32 parameter updated)."""
    h2d_Bps: float = math.inf
    d2h_Bps: float = math.inf
    source: str = "given"
    """``"given"``, ``"measured"`` or ``"cache <path>"``."""

    def to_dict(self) -> dict:
        return {k: (None if v == math.inf else v) for k, v in asdict(self).items()}

    @staticmethod
    def from_dict(d: dict, source: str) -> HostRates:
        def rate(key: str) -> float:
            v = d.get(key)
            return math.inf if v is None else float(v)

        return HostRates(rate("adam_Bps"), rate("h2d_Bps"), rate("d2h_Bps"), source)


def _key(device: torch.device) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return f"{socket.gethostname()}|{name}|torch {torch.__version__}|{torch.get_num_threads()}"


def _best(fn, reps: int) -> float:
    fn()
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_host_rates(
    device: torch.device | str | None = None, *, nbytes: int = 256 << 20, reps: int = 5
) -> HostRates:
    """Time pinned H2D / D2H copies of ``nbytes`` and torch's fused CPU AdamW over
    ``nbytes / 4`` fp32 elements (beside looping copies when ``device`` is CUDA)."""
    dev = torch.device(device) if device is not None else None
    cuda = dev is not None and dev.type == "cuda"
    n = max(1, nbytes // 4)
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    if not cuda:
        adam_s = _best(opt.step, reps)
        return HostRates(n * 4 * ADAMW_TRAFFIC_PER_PARAM_BYTE / adam_s, source="measured")
    host = torch.empty(n, pin_memory=True)
    back = torch.empty(n, pin_memory=True)
    gpu = torch.empty(n, device=dev)
    stream = torch.cuda.Stream(dev)

    def copy(dst, src):
        def run():
            with torch.cuda.stream(stream):
                dst.copy_(src, non_blocking=True)
            stream.synchronize()

        return run

    h2d_s, d2h_s = _best(copy(gpu, host), reps), _best(copy(back, gpu), reps)
    stop = threading.Event()

    def copies() -> None:  # both directions, as FSDP2's all-gathers and gradient copies
        while not stop.is_set():
            with torch.cuda.stream(stream):
                gpu.copy_(host, non_blocking=True)
                back.copy_(gpu, non_blocking=True)
            stream.synchronize()

    t = threading.Thread(target=copies, daemon=True)
    t.start()
    try:
        adam_s = _best(opt.step, reps)
    finally:
        stop.set()
        t.join()
    adam = n * 4 * ADAMW_TRAFFIC_PER_PARAM_BYTE / adam_s
    return HostRates(adam, n * 4 / h2d_s, n * 4 / d2h_s, "measured")


_MEMO: dict[str, HostRates] = {}


def host_rates(device: torch.device | str | None = None, *, cache: bool = True) -> HostRates:
    """This host's rates for ``device``: from this process, the cache file, or measured now
    (then written to the cache file)."""
    from memopt.config import cache_dir

    dev = torch.device(device) if device is not None else torch.device("cpu")
    key = _key(dev)
    if key in _MEMO:
        return _MEMO[key]
    path = os.path.join(cache_dir(), "host_rates.json")
    stored: dict = {}
    if cache and os.path.exists(path):
        try:
            with open(path) as f:
                stored = json.load(f)
        except (OSError, ValueError):
            stored = {}
        if key in stored:
            _MEMO[key] = HostRates.from_dict(stored[key], f"cache {path}")
            return _MEMO[key]
    rates = measure_host_rates(dev)
    _MEMO[key] = rates
    if cache:
        stored[key] = rates.to_dict()
        write_atomic(path, json.dumps(stored, indent=1))
    return replace(rates)
