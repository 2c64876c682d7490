"""A self-contained Inductor partitioner that only offloads layer activations.

``torch.compile(model, options={"custom_partitioner_fn": LayerOffloadPartitioner(...)})``
runs: detect_layers_pass on the joint graph -> Inductor's min-cut partition ->
insert_offload_pass on the forward and backward graphs. memopt's main partitioner calls the
same two passes inside its pipeline; this one exists for the offload tests and benchmark.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch.fx as fx

from memopt import _torch_compat as compat
from memopt._version import __version__
from memopt.offload.result import OffloadResult
from memopt.offload.sync import SyncEntry, default_sync
from memopt.passes.detect_layers import detect_layers_pass
from memopt.passes.insert_offload import insert_offload_pass


class LayerOffloadPartitioner(compat.CustomPartitionerFn):
    """Offload ``offload_layers`` layers (default dict) or follow ``sync`` exactly."""

    def __init__(
        self,
        *,
        offload_layers: int | None = None,
        sync: Mapping[int, SyncEntry] | None = None,
        min_bytes: int = 1 << 20,
        layers: str | None = None,
    ):
        if (offload_layers is None) == (sync is None):
            raise ValueError("give exactly one of offload_layers= and sync=")
        self.offload_layers = offload_layers
        self.sync = None if sync is None else {int(k): tuple(v) for k, v in sync.items()}
        self.min_bytes = min_bytes
        self.layers = layers
        self.layer_names: list[str] = []
        """The layers of the last graph that had any."""
        self.results: list[OffloadResult] = []
        """One per compiled graph with layers, in compile order."""

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        names = detect_layers_pass(gm, self.layers)
        fw, bw = compat.min_cut_partition(gm, joint_inputs, **kwargs)
        if not names:  # e.g. a loss computed in its own graph after a graph break
            return fw, bw
        self.layer_names = names
        if self.offload_layers == 0:
            return fw, bw
        sync = self.sync if self.sync is not None else default_sync(len(names), self.offload_layers)
        result = insert_offload_pass(
            fw,
            bw,
            sync=sync,
            num_fwd_outputs=kwargs["num_fwd_outputs"],
            num_layers=len(names),
            min_bytes=self.min_bytes,
        )
        self.results.append(result)
        return result.fw, result.bw

    def uuid(self) -> str:
        key = f"{__version__}|{self.offload_layers}|{sorted((self.sync or {}).items())}|"
        key += f"{self.min_bytes}|{self.layers}"
        return "memopt-offload-" + hashlib.sha256(key.encode()).hexdigest()[:24]

    def __reduce__(self):
        # Inductor pickles its config into cache keys: the uuid is the stable identity.
        return (str, (self.uuid(),))

    def __deepcopy__(self, memo: dict) -> LayerOffloadPartitioner:
        # Inductor deep-copies its config; results must land on this instance.
        return self
