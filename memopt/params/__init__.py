"""Parameter and optimizer-state offloading (see docs/params.md).

* :func:`apply_param_offload` -- stream a fraction of the layers' weights from pinned host memory
  through a GPU arena of fixed slots (``streamer``, ``arena``, ``placement``).
* :class:`CPUAdamW` -- AdamW with fp32 master weights and moments on the host, optionally
  updated inside backward (fused back pass) and spilled to NVMe (``cpu_adamw``, ``flat``,
  ``nvme``).
* :func:`placement_rows` / :func:`format_placement` -- the report rows (``report``).
"""

from memopt.params.cpu_adamw import CPUAdamW
from memopt.params.nvme import NvmeStore, sequential_throughput
from memopt.params.placement import LayerOffloadPlan, plan_layer_offload
from memopt.params.report import format_placement, placement_rows
from memopt.params.streamer import ParamOffloadHandle, apply_param_offload, find_layers

__all__ = [
    "CPUAdamW",
    "LayerOffloadPlan",
    "NvmeStore",
    "ParamOffloadHandle",
    "apply_param_offload",
    "find_layers",
    "format_placement",
    "placement_rows",
    "plan_layer_offload",
    "sequential_throughput",
]
