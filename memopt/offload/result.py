"""What the offload rewrite did, as a value: per-tensor records, per-layer bytes, a report."""

from __future__ import annotations

from dataclasses import dataclass

import torch.fx as fx

from memopt.offload.sync import Schedule
from memopt.offload.timeline import format_bytes, render_timeline, timeline_dict


@dataclass(frozen=True)
class OffloadedTensor:
    """One host copy per step."""

    layer: int
    source: str
    """The forward node copied to the host (a saved tensor, or the base of saved views)."""
    saved: tuple[str, ...]
    """The saved values it carries (rebuilt as views of the reloaded copy)."""
    saved_indices: tuple[int, ...]
    nbytes: int
    via_base: bool
    """True when the copy is the base of the saved views rather than a saved value."""


@dataclass(frozen=True)
class OffloadResult:
    fw: fx.GraphModule
    bw: fx.GraphModule
    schedule: Schedule
    offloaded: tuple[OffloadedTensor, ...]
    kept: tuple[tuple[int, str, str], ...]
    """``(saved index, name, reason)`` of chosen saved tensors left on the device."""
    notes: tuple[str, ...]
    """Placements the rewrite had to adjust (e.g. a reload moved to an earlier first use)."""
    synchronous: bool
    """The tensors are not on a CUDA device: the copies run synchronously."""

    def bytes_per_layer(self) -> dict[int, int]:
        out = {layer: 0 for layer in self.schedule.offloaded()}
        for t in self.offloaded:
            out[t.layer] = out.get(t.layer, 0) + t.nbytes
        return out

    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.offloaded)

    def summary(self) -> str:
        """A fixed-width report: copies per layer, the timeline, kept tensors and notes."""
        mode = "synchronous (no CUDA device)" if self.synchronous else "async (CUDA streams)"
        how = f", copies {mode}" if self.offloaded else ""  # no copy: no device to tell
        lines = [
            f"activation offload: {len(self.offloaded)} host copies, "
            f"{format_bytes(self.total_bytes())} per step{how}",
            f"{'layer':>5}  {'copies':>6}  {'bytes':>12}  saved values",
        ]
        for layer, nbytes in sorted(self.bytes_per_layer().items()):
            ts = [t for t in self.offloaded if t.layer == layer]
            names = ", ".join(n for t in ts for n in t.saved)
            lines.append(f"{layer:>5}  {len(ts):>6}  {format_bytes(nbytes):>12}  {names}")
        lines.append(render_timeline(self.schedule, self.bytes_per_layer()))
        for i, name, reason in self.kept:
            lines.append(f"kept on device: saved[{i}] {name}: {reason}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "synchronous": self.synchronous,
            "total_bytes": self.total_bytes(),
            "bytes_per_layer": {str(k): v for k, v in self.bytes_per_layer().items()},
            "offloaded": [t.__dict__ for t in self.offloaded],
            "kept": [list(k) for k in self.kept],
            "notes": list(self.notes),
            "timeline": timeline_dict(self.schedule, self.bytes_per_layer()),
        }
