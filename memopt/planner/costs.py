"""Device rates and the roofline.

An op costs its kernel's measured time where memopt timed it on the device (matmuls,
attention, convolutions, reductions: :mod:`memopt.kernel_times`), else ``max(flops / matmul
rate, bytes / HBM rate)``: matmuls are compute-bound, pointwise ops are memory-bound (never
free). A host copy costs ``bytes / PCIe rate``; how much of it hides behind compute is the
step simulation's business (:mod:`memopt.planner.timing`).

Rates are measured once per device by :func:`calibrate` (a matmul, a device copy, pinned
host-to-device and device-to-host copies) and cached as JSON. On CPU, :data:`CPU_DEFAULTS` are
used without measuring.
"""

from __future__ import annotations

import json
import logging
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace

from memopt import timing_lock
from memopt.planner.problem import OpCost

log = logging.getLogger("memopt")

#: Version of the cache file format and of the measuring code; a change re-measures.
CALIBRATION_VERSION = 4  # 2: version 1 timed fake tensors inside a compile; 3: copy_op_s;
# 4: run_offload_s, run_offload_tensor_s


@dataclass(frozen=True, kw_only=True)
class DeviceRates:
    """Throughputs of one device, in units per second."""

    name: str
    """Device name (e.g. ``"NVIDIA H100 80GB HBM3"``) or the name of a default set."""
    matmul_flops_per_s: float
    """Dense matmul rate in the training dtype (bf16 on GPUs, fp32 on CPU)."""
    hbm_bytes_per_s: float
    """Device-memory traffic (bytes read plus written) per second, as a large copy achieves."""
    h2d_bytes_per_s: float
    """Pinned host-to-device copy rate."""
    d2h_bytes_per_s: float
    """Device-to-pinned-host copy rate."""
    copy_op_s: float = 0.0
    """CPU seconds of memopt's offload op plus its wait, per offloaded tensor. Early in the
    forward the GPU runs right behind the CPU that launches its kernels, so this time delays
    the step; the planner charges what the CPU's lead over the GPU cannot absorb."""
    run_offload_s: float = 0.0
    """Forward-thread CPU seconds cross-region offload (:mod:`memopt.offload.step_offload`)
    adds to one offloaded run, besides :attr:`run_offload_tensor_s` per tensor: its saved
    tensors packed and their copies to the host issued. The backward's share (the copy-backs
    issued, the tensors unpacked) is not in it: there the CPU runs ahead of long kernels."""
    run_offload_tensor_s: float = 0.0
    """The same, per saved tensor of the run."""
    cpu_lead_gain: float = 0.0
    """Seconds of lead the CPU gains over the GPU per second of forward compute (0: it never
    gets ahead, every offload op's CPU time delays the GPU). Not measured by
    :func:`calibrate`: :data:`CPU_LEAD_GAIN`, fitted on the H100 host."""
    source: str = "default"
    """``"default"``, ``"measured"`` or ``"cache:<path>"``."""


#: Planning on CPU (tests, CPU training): round numbers, not measured. 100 GFLOP/s matmul and
#: 10 GB/s for memory traffic and for "host" copies (on CPU offload is a plain copy).
CPU_DEFAULTS = DeviceRates(
    name="cpu-default",
    matmul_flops_per_s=100e9,
    hbm_bytes_per_s=10e9,
    h2d_bytes_per_s=10e9,
    d2h_bytes_per_s=10e9,
)

#: The CPU's lead over the GPU grows by this many seconds per second of forward compute. Fitted
#: on the H100 host of docs/benchmarks.md (torch 2.11, Inductor, 8-layer Llama): 11 offload ops
#: in layer 0 (about 1 ms of CPU) left the GPU idle about 1.2 ms longer, 19 ops spread over
#: six layers (1.8 ms of CPU) about 0.9 ms: the CPU gains about a tenth of the GPU's time.
CPU_LEAD_GAIN = 0.1

#: Cross-region offload's forward-thread seconds per run and per tensor for nominal rates: the
#: mean of two calibrations on the H200 host of docs/benchmarks.md (torch 2.11, thirtieth
#: session; :func:`_time_run_offload`): 37 and 102 µs per run, 15.8 and 26.7 µs per tensor.
RUN_OFFLOAD_S, RUN_OFFLOAD_TENSOR_S = 70e-6, 21e-6

#: Nominal H100 SXM rates for planning when no H100 is at hand: bf16 dense matmul at about 60%
#: of the 989 TFLOP/s peak, HBM3 copies at about 85% of 3.35 TB/s, PCIe Gen5 x16 pinned copies
#: at about 50 GB/s each way, the CPU time of an offload op plus its wait as measured on the
#: H100 host of docs/benchmarks.md, and cross-region offload's forward-thread time per run as
#: measured on the H200 host (docs/benchmarks.md, thirtieth session). :func:`calibrate`
#: replaces them with measured values.
H100_DEFAULTS = DeviceRates(
    name="h100-default",
    matmul_flops_per_s=600e12,
    hbm_bytes_per_s=2.8e12,
    h2d_bytes_per_s=50e9,
    d2h_bytes_per_s=50e9,
    copy_op_s=75e-6,
    run_offload_s=RUN_OFFLOAD_S,
    run_offload_tensor_s=RUN_OFFLOAD_TENSOR_S,
    cpu_lead_gain=CPU_LEAD_GAIN,
)


def roofline_s(op: OpCost, rates: DeviceRates) -> float:
    """Seconds for one op: compute-bound or memory-bound, whichever is slower."""
    return max(op.flops / rates.matmul_flops_per_s, op.bytes / rates.hbm_bytes_per_s)


def op_s(op: OpCost, rates: DeviceRates) -> float:
    """Seconds for one op: its measured kernel time where there is one, else the roofline."""
    return op.seconds if op.seconds is not None else roofline_s(op, rates)


def ops_s(ops: Iterable[OpCost], rates: DeviceRates) -> float:
    """Seconds for a sequence of ops (measured kernels, the rest each on its own roofline)."""
    return sum(op_s(op, rates) for op in ops)


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class CalibrationSizes:
    """Problem sizes for the measurement (small ones keep tests fast)."""

    matmul_n: int = 8192
    copy_bytes: int = 1 << 30
    transfer_bytes: int = 256 << 20
    repeats: int = 5
    inner: int = 1
    """Runs of each kernel per timed sample (smaller tensors run more often, so that a
    sample lasts as long as one run at the full sizes and a sync's cost stays as small)."""

    def device_bytes(self) -> int:
        """The most device memory the measurement holds at once (bf16 matmul operands and
        output, a copy's source and destination, a transfer's device side)."""
        return max(3 * self.matmul_n**2 * 2, 2 * self.copy_bytes, self.transfer_bytes)

    def within(self, room: int) -> CalibrationSizes | None:
        """These sizes, halved until the measurement fits ``room`` device bytes (down to
        :data:`SMALLEST`, each run repeated to keep a sample's length), or None when even
        those do not fit."""

        def half(field: str) -> int:  # halved, not below SMALLEST's (nor above its own)
            n, floor = getattr(sizes, field), getattr(SMALLEST, field)
            return max(min(floor, n), n // 2)

        sizes = self
        while sizes.device_bytes() > room:
            smaller = replace(
                sizes,
                matmul_n=half("matmul_n"),
                copy_bytes=half("copy_bytes"),
                transfer_bytes=half("transfer_bytes"),
                inner=sizes.inner * 2,
            )
            if smaller.device_bytes() == sizes.device_bytes():
                return None  # at the smallest sizes
            sizes = smaller
        return sizes


#: The smallest measurement: a copy of 2 x 128 MiB still passes every GPU's L2 cache (50 MiB
#: on an H100, 126 MB on a B200), a bf16 matmul of 4096 squared still runs near its peak rate.
SMALLEST = CalibrationSizes(matmul_n=4096, copy_bytes=128 << 20, transfer_bytes=64 << 20)


def calibrate(
    device: str = "cuda",
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    refresh: bool = False,
    sizes: CalibrationSizes | None = None,
    measure: bool = True,
    room: int | Callable[[], int] | None = None,
) -> DeviceRates | None:
    """Rates of ``device``: measured once, then read from ``cache_dir`` (no caching if None).

    A CPU device returns :data:`CPU_DEFAULTS` without measuring. ``refresh`` re-measures.
    The cache file is keyed by device name and torch version. ``measure=False``: the cached
    rates or None, never a measurement. ``room``: the device bytes a measurement may take
    (or a function that tells, asked only when measuring): smaller sizes, each run repeated;
    where even the smallest does not fit, this process plans with :data:`H100_DEFAULTS` and
    nothing is cached (a later one measures). It measures under the host's measuring lock
    (:mod:`memopt.timing_lock`), and takes the cache's rates if another process wrote them
    while this one waited.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return CPU_DEFAULTS
    name = _device_name(dev)
    path = None
    if cache_dir is not None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{name}-torch{torch.__version__}").strip("-")
        path = os.path.join(os.fspath(cache_dir), f"rates-{slug}.json")
        if not refresh:
            cached = _read_cache(path)
            if cached is not None:
                return cached
    if not measure:
        return None
    if not refresh and name in _unmeasured:
        return _unmeasured[name]  # this process plans on one set of rates
    with timing_lock.held(cache_dir, f"calibrating {name}"):
        if path is not None and not refresh:
            cached = _read_cache(path)  # another process calibrated while this one waited
            if cached is not None:
                return cached
        return _calibrate_now(dev, name, path, sizes or CalibrationSizes(), room)


def _calibrate_now(dev, name: str, path: str | None, sizes: CalibrationSizes, room) -> DeviceRates:
    import torch

    if callable(room):
        room = room()
    if room is not None:
        fitted = sizes.within(room)
        if fitted is None:
            return _unmeasured_rates(name, f"{room >> 20} MiB of room")
        sizes = fitted
    try:
        rates = _measure(dev, sizes)
    except torch.OutOfMemoryError:  # the room counted cached blocks too fragmented to use
        return _unmeasured_rates(name, "out of memory")
    rates = replace(rates, name=name, source="measured")
    implausible = check_rates(rates)
    if implausible:
        raise RuntimeError(f"device calibration on {name} measured {implausible}")
    if path is not None:
        _write_cache(path, rates)
    return rates


#: Above these a measurement is wrong (no 2026 device is near them): FLOP/s, bytes/s.
_MAX_RATES = {
    "matmul_flops_per_s": 2e16,
    "hbm_bytes_per_s": 5e13,
    "h2d_bytes_per_s": 2e12,
    "d2h_bytes_per_s": 2e12,
}
#: Above this the copy ops' CPU time is wrong (a busy host, or a debugger): seconds per copy
#: (and per offloaded run).
_MAX_COPY_OP_S = 0.01


def check_rates(rates: DeviceRates) -> str:
    """'' when every rate is plausible, else which one is not."""
    bad = [
        f"{k}={getattr(rates, k):.3g} (above {v:.0e})"
        for k, v in _MAX_RATES.items()
        if not 0 < getattr(rates, k) <= v
    ]
    for k in ("copy_op_s", "run_offload_tensor_s", "run_offload_s"):
        if not 0 <= getattr(rates, k) <= _MAX_COPY_OP_S:
            bad.append(f"{k}={getattr(rates, k):.3g} (outside 0..{_MAX_COPY_OP_S})")
    return ", ".join(bad)


#: device name -> the nominal rates a process plans with when it could not calibrate
_unmeasured: dict[str, DeviceRates] = {}


def _unmeasured_rates(name: str, why: str) -> DeviceRates:
    """:data:`H100_DEFAULTS` for the rest of this process (nothing cached: a later process
    measures), with one warning."""
    rates = replace(H100_DEFAULTS, name=f"{H100_DEFAULTS.name} ({name} not measured)")
    _unmeasured[name] = rates
    log.warning(
        "memopt: %s could not be calibrated (%s; the measurement needs %d MiB, the room is the "
        "device's free memory and, under a byte budget, what the budget leaves): planning with "
        "nominal H100 rates in this process, nothing cached",
        name, why, SMALLEST.device_bytes() >> 20,
    )  # fmt: skip
    return rates


def _device_name(dev) -> str:
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return dev.type


def _read_cache(path: str) -> DeviceRates | None:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    if data.get("version") != CALIBRATION_VERSION:
        return None
    try:
        fields = {k: data[k] for k in ("name", "matmul_flops_per_s", "hbm_bytes_per_s")}
        fields.update(
            h2d_bytes_per_s=data["h2d_bytes_per_s"],
            d2h_bytes_per_s=data["d2h_bytes_per_s"],
            copy_op_s=data["copy_op_s"],
            run_offload_s=data["run_offload_s"],
            run_offload_tensor_s=data["run_offload_tensor_s"],
            cpu_lead_gain=data["cpu_lead_gain"],
        )
    except KeyError:
        return None
    rates = DeviceRates(**fields, source=f"cache:{path}")
    return None if check_rates(rates) else rates


def _write_cache(path: str, rates: DeviceRates) -> None:
    from memopt.config import write_atomic

    data = asdict(rates)
    data.pop("source")
    data["version"] = CALIBRATION_VERSION
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def _measure(dev, sizes: CalibrationSizes) -> DeviceRates:
    """Time a matmul, a device copy and host copies on ``dev`` (median of ``sizes.repeats``)."""
    import torch

    from memopt import _torch_compat as compat

    is_cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if is_cuda else torch.float32
    sync = (lambda: torch.cuda.synchronize(dev)) if is_cuda else (lambda: None)

    n, k = sizes.matmul_n, sizes.inner
    with compat.real_tensors():  # called from the partitioner, inside the compile's fake mode
        mm_s = _time_matmul(dev, n, dtype, sync, sizes.repeats, k)
        copy_s = _time_copy(dev, sizes.copy_bytes, sync, sizes.repeats, k)
        h2d_s, d2h_s = _time_transfers(dev, sizes.transfer_bytes, is_cuda, sync, sizes.repeats, k)
        op_s = _time_copy_ops(dev, sync, sizes.repeats) if is_cuda else 0.0
    run_s, tensor_s = _time_run_offload(dev, sync, sizes.repeats) if is_cuda else (0.0, 0.0)
    return DeviceRates(
        name=dev.type,
        matmul_flops_per_s=2 * n**3 / mm_s,
        hbm_bytes_per_s=2 * sizes.copy_bytes / copy_s,
        h2d_bytes_per_s=sizes.transfer_bytes / h2d_s,
        d2h_bytes_per_s=sizes.transfer_bytes / d2h_s,
        copy_op_s=op_s,
        run_offload_s=run_s,
        run_offload_tensor_s=tensor_s,
        cpu_lead_gain=CPU_LEAD_GAIN if is_cuda else 0.0,
        source="measured",
    )


def _time_matmul(
    dev, n: int, dtype, sync: Callable[[], None], repeats: int, inner: int = 1
) -> float:
    import torch

    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    out = torch.empty(n, n, device=dev, dtype=dtype)
    return _time(lambda: torch.mm(a, b, out=out), sync, repeats, inner)


def _time_copy(dev, nbytes: int, sync: Callable[[], None], repeats: int, inner: int = 1) -> float:
    import torch

    src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    return _time(lambda: dst.copy_(src), sync, repeats, inner)


def _time_transfers(
    dev, nbytes: int, pinned: bool, sync: Callable[[], None], repeats: int, inner: int = 1
) -> tuple[float, float]:
    import torch

    host = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=pinned)
    on_dev = torch.empty(nbytes // 4, device=dev, dtype=torch.float32)
    h2d = _time(lambda: on_dev.copy_(host, non_blocking=True), sync, repeats, inner)
    d2h = _time(lambda: host.copy_(on_dev, non_blocking=True), sync, repeats, inner)
    return h2d, d2h


def _time_copy_ops(dev, sync: Callable[[], None], repeats: int, rounds: int = 50) -> float:
    """CPU seconds of memopt's offload op plus its wait on a 64 KiB tensor (whose copy takes
    the GPU far less time than the ops take the CPU), per offload, without synchronizing."""
    import torch

    from memopt.offload import ops

    t = torch.zeros(16384, device=dev)

    def trips() -> None:
        for _ in range(rounds):  # each host buffer goes back to the pool at once
            ops.wait_offload(ops.offload(t), [t], None)

    trips()  # warm-up: the pinned pool and the transfer stream
    sync()
    samples = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        trips()
        samples.append(time.perf_counter() - t0)
        sync()
    return statistics.median(samples) / rounds


def _time_run_offload(
    dev, sync: Callable[[], None], repeats: int, counts: tuple[int, int] = (4, 24)
) -> tuple[float, float]:
    """Forward-thread CPU seconds :class:`~memopt.offload.step_offload.StepOffload` adds to a
    run, as ``(per run, per tensor)``: a run saving ``counts`` tensors of 1 MiB each, timed
    from its call to its copies issued, offloaded less kept, without synchronizing; the line
    through the two counts (each of its terms at least 0).

    It runs on a thread of its own: the partitioner that calibrates traces under a fake-tensor
    mode, without grad and with saved-tensor hooks disabled, all thread-local."""
    import threading

    got: list = []

    def work() -> None:
        try:
            got.append([_run_offload_us(dev, sync, repeats, n) for n in counts])
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread
            got.append(e)

    t = threading.Thread(target=work, name="memopt-calibrate")
    t.start()
    t.join()
    if isinstance(got[0], BaseException):
        raise got[0]
    (n0, n1), (a0, a1) = counts, got[0]
    per_tensor = max(0.0, (a1 - a0) / (n1 - n0))
    return max(0.0, a0 - per_tensor * n0) * 1e-6, per_tensor * 1e-6


def _run_offload_us(dev, sync: Callable[[], None], repeats: int, tensors: int) -> float:
    """Median microseconds the forward thread spends on one run saving ``tensors`` tensors,
    offloaded less kept (:func:`_time_run_offload`)."""
    import torch

    from memopt.offload.step_offload import StepOffload

    w = torch.ones((), device=dev, dtype=torch.bfloat16, requires_grad=True)
    xs = [torch.randn(1 << 19, device=dev, dtype=torch.bfloat16) for _ in range(tensors)]
    med = {}
    for mode in ((), (0,)):
        samples = []
        for r in range(max(5, repeats) + 2):  # two warm-ups: the pinned pool, the stream
            off = StepOffload(mode, min_bytes=1024)  # w stays
            sync()
            t0 = time.perf_counter()
            with off.run(0, ()):
                ys = [x * w for x in xs]  # each saves its x
            dt = time.perf_counter() - t0
            off.backward_reached(1)
            torch.autograd.backward(ys, [torch.ones_like(y) for y in ys])
            sync()
            del ys
            if r >= 2:
                samples.append(dt)
        med[mode] = statistics.median(samples)
    return 1e6 * (med[(0,)] - med[()])


def _time(
    fn: Callable[[], object], sync: Callable[[], None], repeats: int, inner: int = 1
) -> float:
    """Median seconds of one call of ``fn`` over ``repeats`` samples of ``inner`` calls."""
    fn()  # warm-up (allocator, kernel selection)
    sync()
    samples = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append(max(time.perf_counter() - t0, 1e-9) / inner)
    return statistics.median(samples)
