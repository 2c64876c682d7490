"""memopt: a graph-level training-memory optimizer for PyTorch on top of torch.compile.

model = memopt.optimize(model, level=1)      # or MEMOPT_CONFIG="BiasGelu+:1:-1"
loss = model(**batch).loss; loss.backward()
print(memopt.report(model).table())
"""

# the offload ops must exist before any compiled code that calls them runs: Inductor's warm
# FX graph cache loads such code without running memopt's partitioner (which imports them)
import memopt.offload.ops  # noqa: F401
from memopt._version import __version__
from memopt.api import MemoptBackend, optimize, param_offload_handle, report
from memopt.config import MemoptConfig, resolve_config
from memopt.errors import ConfigError, KeptGraphError, PlanError
from memopt.params import HostAdamW, StateSwap
from memopt.plan import PlanSpec, Strategy, parse_plan, parse_plans
from memopt.report import Report

__all__ = [
    "HostAdamW",
    "ConfigError",
    "KeptGraphError",
    "MemoptBackend",
    "MemoptConfig",
    "PlanError",
    "PlanSpec",
    "Report",
    "StateSwap",
    "Strategy",
    "__version__",
    "optimize",
    "param_offload_handle",
    "parse_plan",
    "parse_plans",
    "report",
    "resolve_config",
]


def __getattr__(name: str):
    if name == "CPUAdamW":  # removed: memopt.params raises the error that names what replaced it
        import memopt.params

        return memopt.params.CPUAdamW
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
