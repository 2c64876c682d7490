"""Parameter and optimizer-state offload (see docs/params.md).

* :func:`shard_with_offload` -- parameter offload through FSDP2: ``fully_shard`` each layer
  with a host or device offload policy so that a share of the bytes lives on the host
  (``fsdp``, ``host_plan``, ``layers``); :class:`HostAdamW` updates the host shards on the CPU,
  during backward with ``overlap=True`` (``host_adamw``, ``adamw_kernel``, ``update_queue``,
  ``clip``).
* the NVMe tier of HostAdamW's moments (``nvme``, ``host_nvme``).
* ``param_offload="auto"`` / bytes: the placement grown after the first steps from the
  measured step and :func:`host_rates` (``auto``, ``rates``, ``host_plan.choose_placement``).
* :func:`placement_rows` / :func:`format_placement` -- the report rows (``report``).
"""

from memopt.params.fsdp import FsdpOffload, offload_parameters, shard_with_offload
from memopt.params.host_adamw import HostAdamW
from memopt.params.host_plan import HostPlan, plan_host_groups
from memopt.params.layers import find_layers
from memopt.params.nvme import NvmeStore, sequential_throughput
from memopt.params.rates import HostRates, host_rates
from memopt.params.report import format_placement, placement_rows
from memopt.params.state_swap import StateSwap

__all__ = [
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
    "StateSwap",
]


def __getattr__(name: str):
    if name == "CPUAdamW":  # removed: a clear error instead of an AttributeError
        from memopt.errors import ConfigError

        raise ConfigError(
            "memopt.CPUAdamW was removed: with parameters kept on the GPU it ran 1.33-1.40x "
            "slower than torchao's CPUOffloadOptimizer at the same placement (docs/params.md). "
            "For optimizer states on the host with parameters on the GPU use "
            "torchao.optim.CPUOffloadOptimizer; to move parameters too, "
            "memopt.optimize(model, param_offload=...) with memopt.HostAdamW"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
