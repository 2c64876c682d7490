"""Whether an activation offload can hide behind compute: plain numbers, no torch.

All copies of one optimized graph go on one transfer stream (memopt.offload.ops), the copies
to the host during the forward and the copies back during the backward. The rewrite issues a
layer's copy after its forward and needs it back before its backward, so at best the copies
overlap the whole step's compute; when they take longer than that, the step waits for them.
The forward and backward seconds come from the cost model's roofline op times, which run
shorter than the kernels really do (ViT at the GPU zoo's size on the H100: 21.5 ms predicted,
31.9 ms measured), so the check errs towards warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OffloadWindow:
    """One graph's offload against its predicted compute."""

    nbytes: int
    """Bytes copied each way per step."""
    layers: int
    """Offloaded layers."""
    fwd_s: float
    bwd_s: float
    d2h_bytes_per_s: float
    h2d_bytes_per_s: float

    @property
    def copy_s(self) -> float:
        """Both directions on one stream."""
        return self.nbytes / self.d2h_bytes_per_s + self.nbytes / self.h2d_bytes_per_s

    @property
    def exposed_s(self) -> float:
        """Copy time the step's compute cannot cover (a lower bound of the added time)."""
        return max(0.0, self.copy_s - (self.fwd_s + self.bwd_s))

    def fitting_layers(self) -> int:
        """How many of the offloaded layers' copies (equal shares) fit inside the step's
        compute on one stream."""
        if self.layers <= 0 or self.nbytes <= 0:
            return self.layers
        per_layer = self.copy_s / self.layers
        return min(self.layers, math.floor((self.fwd_s + self.bwd_s) / per_layer))

    def note(self) -> str | None:
        """A warning when the copies cannot hide, with the layer count that would."""
        if self.exposed_s <= 0:
            return None
        fit = self.fitting_layers()
        advice = (
            f"about {fit} layer(s) would fit (offload_layers={fit})"
            if fit > 0
            else "not one layer's copies fit"
        )
        return (
            f"the copies cannot hide: {self.nbytes / 1e9:.2f} GB each way take "
            f"{1e3 * self.copy_s:.1f} ms on one copy stream (D2H {self.d2h_bytes_per_s / 1e9:.0f}"
            f" GB/s, H2D {self.h2d_bytes_per_s / 1e9:.0f} GB/s) against {1e3 * self.fwd_s:.1f} ms "
            f"forward + {1e3 * self.bwd_s:.1f} ms backward predicted; expect at least "
            f"{1e3 * self.exposed_s:.1f} ms more per step; {advice}"
        )
