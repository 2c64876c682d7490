"""accelerate: optimize first, then ``prepare`` with accelerate's dynamo backend left at "no".

    accelerator = Accelerator()                      # dynamo_backend "no" (the default)
    model = memopt.optimize(model, level=1)
    model, opt, loader = accelerator.prepare(model, opt, loader)

accelerate refuses backend names it does not list (``TorchDynamoPlugin(backend="memopt")``:
"'MEMOPT' is not a valid DynamoBackend") and turns the backend into an enum, so a callable is
refused too; the compiled model passes through ``prepare`` untouched (DDP/FSDP wrap it).
:func:`prepare` checks that and returns what ``accelerator.prepare`` returns.
"""

from __future__ import annotations

from typing import Any

import torch

import memopt
from memopt.errors import ConfigError
from memopt.integrations.common import compiled_inside


def prepare(accelerator: Any, model: torch.nn.Module, *rest: Any, **optimize_kwargs: Any) -> Any:
    """``accelerator.prepare(memopt.optimize(model, **optimize_kwargs), *rest)``, refusing an
    accelerator that would compile the model a second time with its own backend."""
    plugin = getattr(accelerator.state, "dynamo_plugin", None)
    backend = getattr(getattr(plugin, "backend", None), "value", "NO")
    if str(backend).upper() != "NO":
        raise ConfigError(
            f"accelerate's dynamo backend is {str(backend).lower()!r}: it would compile the "
            "memopt-optimized model again; leave it at 'no' (Accelerator(dynamo_backend='no'), "
            "no --dynamo_backend in accelerate launch) and let memopt.optimize compile"
        )
    if compiled_inside(model) is model and not hasattr(model, "_orig_mod"):
        model = memopt.optimize(model, **optimize_kwargs)
    return accelerator.prepare(model, *rest)
