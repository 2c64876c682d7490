"""``param_offload="auto"`` / ``"8GiB"``: the placement chosen from measured rates.

    optimize / shard_with_offload   groups placed for what memory needs (``need``; 0 for auto)
    HostAdamW.step, steps 2..k+1    time between steps, less the waits for host updates
    step k+1                        all ranks agree (max step, min rates); choose_placement:
                                    more groups to the host while their CPU update and copies
                                    hide under the step. A probe first: half of the groups the
                                    choice adds move (shards and moments; FSDP2's prefetch
                                    depth from the PCIe rate)
    steps k+2..2k+1                 the update worker's busy seconds per step: the host AdamW's
                                    rate *under training* (timed alone it ran a third faster
                                    than beside the training thread on the H100 host)
    step 2k+1                       choose_placement again at that rate; the rest move

The decision is plain data (``host_plan.choose_placement``); this module only measures, agrees
across ranks and applies it. Groups never move back to the device (the memory they freed may be
in use), so the probe moves no more than half of what the first estimate asks.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from memopt import ranks
from memopt.params.host_plan import (
    ADAMW_TRAFFIC_PER_PARAM_BYTE,
    AutoChoice,
    HostPlan,
    choose_placement,
    grow_host_plan,
)
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
    probe: HostPlan | None = None
    """The placement the probe steps ran (None: the choice was applied at once)."""
    probe_step_s: list[float] = field(default_factory=list)
    """Seconds per probe step, less the waits for host updates."""
    probe_busy_s: list[float] = field(default_factory=list)
    """The update worker's busy seconds in each probe step."""
    probe_adam_Bps: float | None = None
    """The host AdamW's rate measured under training in the probe steps (this rank's state
    bytes per busy second)."""
    loaded_adam_Bps: float | None = None
    """The rate the final choice used: the slower of the timed-alone and the under-training
    rate, the slowest rank's."""
    _device_step_s: float = 0.0
    _probe_note: str = ""
    _last: tuple[float, float, float] | None = None
    _calls: int = 0

    def on_step(self, optimizer, record) -> None:
        """Called at the end of each ``HostAdamW.step``: time it, probe, then choose."""
        if self.status not in ("measuring", "probing"):
            return
        self._calls += 1
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        stats = optimizer.host_stats()
        now = (time.perf_counter(), stats["wait_s"], stats["busy_s"])
        last, self._last = self._last, now
        if last is not None and self._calls > 2:  # step 1 compiles: its end starts
            step = max(0.0, (now[0] - last[0]) - (now[1] - last[1]))
            if self.status == "measuring":
                self.step_s.append(step)
            else:
                self.probe_step_s.append(step)
                self.probe_busy_s.append(now[2] - last[2])
        if self.status == "measuring" and len(self.step_s) >= self.measure_steps:
            self._first_choice(optimizer, record)
        elif self.status == "probing" and len(self.probe_step_s) >= self.measure_steps:
            self._final_choice(record)

    def _first_choice(self, optimizer, record) -> None:
        if getattr(optimizer, "nvme_tier", False):
            self.status = "kept: the NVMe tier's moment file is sized for the first placement"
            return
        self._device_step_s, rates = _agree(statistics.median(self.step_s), self.rates)
        plan, choice = self._choose(record.plan, rates.adam_Bps, rates)
        probe = grow_host_plan(
            record.plan, max(self.need, (record.plan.host_share + plan.host_share) / 2)
        )
        if probe.host_bytes in (0, plan.host_bytes):  # nothing to time, or nothing after it
            self.choice = choice
            moved = record.grow(plan, choice.prefetch)
            self.status = f"chosen after step {self._calls}: {moved} group(s) moved to the host"
            return
        moved = record.grow(probe, choice.prefetch)
        self.probe, self.status = probe, "probing"
        self._probe_note = f"probe of {moved} group(s) after step {self._calls}"

    def _final_choice(self, record) -> None:
        world = ranks.world_size()
        busy = statistics.median(self.probe_busy_s)
        moved_bytes = record.plan.host_bytes / world * ADAMW_TRAFFIC_PER_PARAM_BYTE
        loaded = moved_bytes / busy if busy > 0 else float("inf")
        self.probe_adam_Bps = loaded
        _, rates = _agree(self._device_step_s, replace_adam(self.rates, loaded))
        self.loaded_adam_Bps = rates.adam_Bps
        plan, self.choice = self._choose(record.plan, rates.adam_Bps, rates)
        moved = record.grow(plan, self.choice.prefetch)
        self.status = (
            f"chosen after step {self._calls} ({self._probe_note}; host AdamW "
            f"{_gbps(loaded)} under training, {_gbps(rates.adam_Bps)} used): {moved} more "
            "group(s) moved to the host"
        )

    def _choose(self, plan: HostPlan, adam_Bps: float, rates: HostRates):
        return choose_placement(
            plan,
            self.need,
            self._device_step_s,
            adam_Bps=adam_Bps,
            h2d_Bps=rates.h2d_Bps,
            d2h_Bps=rates.d2h_Bps,
            world=ranks.world_size(),
        )

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "need": self.need,
            "budget_bytes": self.budget_bytes,
            "rates": self.rates.to_dict(),
            "step_s": list(self.step_s),
            "probe_host_share": None if self.probe is None else self.probe.host_share,
            "probe_step_s": list(self.probe_step_s),
            "probe_busy_s": list(self.probe_busy_s),
            "probe_adam_Bps": self.probe_adam_Bps,
            "loaded_adam_Bps": self.loaded_adam_Bps,
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


def replace_adam(rates: HostRates, loaded_Bps: float) -> HostRates:
    """``rates`` with the host AdamW at the slower of its timed-alone and under-training rate."""
    return HostRates(min(rates.adam_Bps, loaded_Bps), rates.h2d_Bps, rates.d2h_Bps, rates.source)


def _gbps(v: float) -> str:
    return "none" if v == float("inf") else f"{v / 1e9:.1f} GB/s"


def _agree(step_s: float, rates: HostRates) -> tuple[float, HostRates]:
    """Every rank must choose the same groups: the slowest step and the slowest rates."""
    if ranks.world_size() == 1:
        return step_s, rates
    inv = [1.0 / x for x in (rates.adam_Bps, rates.h2d_Bps, rates.d2h_Bps)]
    s, a, h, d = ranks.agree_max([step_s, *inv], dtype=torch.float64)
    rate = [float("inf") if x == 0 else 1.0 / x for x in (a, h, d)]
    return s, HostRates(*rate, source=rates.source)
