"""Parameter and optimizer-state offload (see docs/params.md).

* :func:`shard_with_offload` -- parameter offload through FSDP2: ``fully_shard`` each layer
  with a host or device offload policy so that a share of the bytes lives on the host
  (``fsdp``, ``host_plan``, ``layers``); :class:`HostAdamW` updates the host shards on the CPU,
  during backward with ``overlap=True`` (``host_adamw``, ``adamw_kernel``, ``update_queue``,
  ``clip``).
* :class:`CPUAdamW` -- AdamW with fp32 master weights and moments on the host for parameters
  that stay on the device, optionally spilled to NVMe (``cpu_adamw``, ``flat``, ``nvme``).
* ``param_offload="auto"`` / bytes: the placement grown after the first steps from the
  measured step and :func:`host_rates` (``auto``, ``rates``, ``host_plan.choose_placement``).
* :func:`placement_rows` / :func:`format_placement` -- the report rows (``report``).
"""

from memopt.params.cpu_adamw import CPUAdamW
from memopt.params.fsdp import FsdpOffload, offload_parameters, shard_with_offload
from memopt.params.host_adamw import HostAdamW
from memopt.params.host_plan import HostPlan, plan_host_groups
from memopt.params.layers import find_layers
from memopt.params.nvme import NvmeStore, sequential_throughput
from memopt.params.rates import HostRates, host_rates
from memopt.params.report import format_placement, placement_rows

__all__ = [
    "CPUAdamW",
    "FsdpOffload",
    "HostAdamW",
    "HostPlan",
    "HostRates",
    "NvmeStore",
    "find_layers",
    "format_placement",
    "host_rates",
    "offload_parameters",
    "placement_rows",
    "plan_host_groups",
    "sequential_throughput",
    "shard_with_offload",
]
