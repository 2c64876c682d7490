"""torchtitan: its compile hook takes a backend *name* (``[compile] backend``, passed to
``TransformerBlock.compile(backend=..., fullgraph=True)`` per block), and ``"memopt"`` resolves
through memopt's ``torch_dynamo_backends`` entry point, which reads its settings from the
environment. So the recipe is two config keys and the environment :func:`memopt_env` builds:

    [compile]
    enable = true
    components = ["model", "loss"]
    backend = "memopt"

    MEMOPT_LEVEL=1 torchrun ... -m torchtitan.train --job.config_file llama3_8b.toml

(or ``--compile.enable --compile.backend memopt`` on the command line). torchtitan's
``model_converters`` (``ModelConfigConverter.convert``) transform the model *config* before
the model is built (float8, LoRA), so they are not the hook for a compiler backend.
Each block is its own compiled graph: plans, budgets and the report are per block
(``memopt.report()`` with no argument gives the environment backend's report).
torchtitan 0.3 refuses every backend but inductor/aot_eager for a FlexAttention model;
:func:`check_attention` says so in memopt's words before the launch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memopt.config import resolve_config
from memopt.errors import ConfigError

#: torchtitan's options that select the memopt backend (its CompileConfig fields).
COMPILE_ARGS = ("--compile.enable", "--compile.backend", "memopt")

_ENV = {
    "level": "MEMOPT_LEVEL",
    "config": "MEMOPT_CONFIG",
    "probe_level": "MEMOPT_PROBE_LEVEL",
    "strict": "MEMOPT_STRICT",
    "budget": "MEMOPT_BUDGET",
}


def memopt_env(
    *,
    level: int | None = None,
    config: str | Sequence[str] | None = None,
    probe_level: int | None = None,
    strict: bool | None = None,
    budget: float | str | None = None,
) -> dict[str, str]:
    """The environment variables that give the ``"memopt"`` backend these settings (checked
    as :func:`memopt.optimize` checks them; a bad value raises :class:`memopt.ConfigError`
    here, not in the first training step)."""
    given = {
        "level": level,
        "config": config,
        "probe_level": probe_level,
        "strict": strict,
        "budget": budget,
    }
    given = {k: v for k, v in given.items() if v is not None}
    resolve_config(**given)  # the same checks as optimize()
    return {_ENV[k]: _env_value(k, v) for k, v in given.items()}


def _env_value(key: str, value: Any) -> str:
    if key == "config" and not isinstance(value, str):
        return ",".join(str(p) for p in value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def check_attention(model_config: Any) -> None:
    """Raise :class:`memopt.ConfigError` when a torchtitan model config (``Llama3Model.Config``,
    ``model_spec.model``) has a FlexAttention layer: torchtitan 0.3's ``apply_compile`` refuses
    the ``"memopt"`` backend for it. Needs torchtitan (imported here, not at module import)."""
    from torchtitan.models.common.attention import FlexAttention

    flex = [
        i
        for i, layer in enumerate(getattr(model_config, "layers", None) or [])
        if isinstance(
            getattr(getattr(layer, "attention", None), "inner_attention", None),
            FlexAttention.Config,
        )
    ]
    if flex:
        raise ConfigError(
            f"torchtitan model layers {flex} use FlexAttention: torchtitan's apply_compile "
            "accepts only the 'inductor' and 'aot_eager' backends for it, so "
            "--compile.backend memopt fails there. Build the model with "
            "attn_backend='varlen' (CUDA; e.g. --config llama3_debugmodel_varlen_attn). "
            "See docs/integrations.md, torchtitan"
        )


def toml_section(extra: Mapping[str, Any] | None = None) -> str:
    """The ``[compile]`` section of a torchtitan job config that compiles with memopt."""
    keys = {"enable": True, "components": ["model", "loss"], "backend": "memopt", **(extra or {})}
    if keys["backend"] != "memopt":
        raise ConfigError(f"toml_section: backend must be 'memopt', got {keys['backend']!r}")
    return "\n".join(["[compile]", *(f"{k} = {json.dumps(v)}" for k, v in keys.items())])
