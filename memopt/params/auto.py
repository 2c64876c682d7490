"""``param_offload="auto"`` / ``"8GiB"``: the placement chosen from measured rates.

    optimize / shard_with_offload   groups placed for what memory needs (``need``; 0 for auto)
    HostAdamW.step, steps 2..k+1    time between steps, less the waits for host updates
    step k+1                        all ranks agree (max step, min rates); choose_placement:
                                    more groups to the host while their CPU update and copies
                                    hide under the step; their shards and moments move there;
                                    FSDP2's prefetch depth from the PCIe rate

The decision is plain data (``host_plan.choose_placement``); this module only measures, agrees
across ranks and applies it once. Groups never move back to the device (the memory they freed
may be in use).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from memopt.params.host_plan import AutoChoice, choose_placement
from memopt.params.rates import HostRates

#: Steps timed before choosing (the first step is not timed: it compiles).
MEASURE_STEPS = 3


@dataclass
class AutoOffload:
    """The automatic placement's inputs, measurements and (once made) its choice."""

    need: float
    """Least host share (from the byte budget; 0 for ``"auto"``)."""
    rates: HostRates
    budget_bytes: int | None = None
    """``param_offload`` as bytes: at most this much of this rank's parameter shards on the
    device (None for ``"auto"``)."""
    measure_steps: int = MEASURE_STEPS
    step_s: list[float] = field(default_factory=list)
    """Measured seconds per step, less the training thread's waits for host updates."""
    choice: AutoChoice | None = None
    status: str = "measuring"
    _last: tuple[float, float] | None = None
    _calls: int = 0

    def on_step(self, optimizer, record) -> None:
        """Called at the end of each ``HostAdamW.step``: time it, then choose once."""
        if self.choice is not None or self.status != "measuring":
            return
        self._calls += 1
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        now = (time.perf_counter(), optimizer.host_stats()["wait_s"])
        if self._last is not None and self._calls > 2:  # step 1 compiles: its end starts
            self.step_s.append(max(0.0, (now[0] - self._last[0]) - (now[1] - self._last[1])))
        self._last = now
        if len(self.step_s) < self.measure_steps:
            return
        if getattr(optimizer, "nvme_tier", False):
            self.status = "kept: the NVMe tier's moment file is sized for the first placement"
            return
        step_s, rates = _agree(statistics.median(self.step_s), self.rates)
        plan, self.choice = choose_placement(
            record.plan,
            self.need,
            step_s,
            adam_Bps=rates.adam_Bps,
            h2d_Bps=rates.h2d_Bps,
            d2h_Bps=rates.d2h_Bps,
            world=dist.get_world_size() if dist.is_initialized() else 1,
        )
        moved = record.grow(plan, self.choice.prefetch)
        self.status = f"chosen after step {self._calls}: {moved} group(s) moved to the host"

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "need": self.need,
            "budget_bytes": self.budget_bytes,
            "rates": self.rates.to_dict(),
            "step_s": list(self.step_s),
            "choice": None if self.choice is None else self.choice.to_dict(),
        }

    def summary(self) -> str:
        """One line for the report."""
        r = self.rates
        head = f"param_offload auto: {self.status}; rates ({r.source}): CPU AdamW "
        head += f"{r.adam_Bps / 1e9:.1f} GB/s, H2D {_gbps(r.h2d_Bps)}, D2H {_gbps(r.d2h_Bps)}"
        c = self.choice
        if c is None:
            return head
        return (
            f"{head}; step {c.device_step_s * 1e3:.1f} ms -> host share {c.host_share:.3f} "
            f"(need {c.need:.3f}, free {c.free_share:.3f}), prefetch {c.prefetch}, "
            f"predicted step {c.predicted_step_s * 1e3:.1f} ms (host update "
            f"{c.host_update_s * 1e3:.1f} ms, copies {c.transfer_s * 1e3:.1f} ms)"
        )


def _gbps(v: float) -> str:
    return "none" if v == float("inf") else f"{v / 1e9:.1f} GB/s"


def _agree(step_s: float, rates: HostRates) -> tuple[float, HostRates]:
    """Every rank must choose the same groups: the slowest step and the slowest rates."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return step_s, rates
    cuda = "nccl" in str(dist.get_backend()) and torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    inv = [1.0 / x for x in (rates.adam_Bps, rates.h2d_Bps, rates.d2h_Bps)]
    t = torch.tensor([step_s, *inv], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    s, a, h, d = t.tolist()
    rate = [float("inf") if x == 0 else 1.0 / x for x in (a, h, d)]
    return s, HostRates(*rate, source=rates.source)
