"""Whether torch.compile compiled anything of the optimized model's training step.

memopt plans what torch.compile compiles for training. When Dynamo traces none of the
model's forward (it skips the frame: an ``nn.LSTM`` without ``allow_rnn``, an unsupported
construct at the top), or compiles only graphs that need no gradients, the step runs eagerly and
no setting (level, plan strings, budget, offload) applies. That is said once, after the first
forward that trains, as a warning and a line in the report, with the likely cause."""

from __future__ import annotations

from typing import Any

import torch

_RNNS = (torch.nn.RNNBase,)


def trains(output: Any) -> bool:
    """Whether a forward's output carries gradients (the step will run a backward)."""
    if not torch.is_grad_enabled():
        return False
    leaves = torch.utils._pytree.tree_leaves(output)
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves)


def _settings(config: Any) -> str:
    """What the user asked for, as the note names it."""
    asked = []
    if config.budget is not None:
        asked.append(f"budget={config.budget!r}")
    if config.level:
        asked.append(f"level={config.level}")
    if config.plans:
        asked.append("plan strings")
    if config.offload_k:
        asked.append(f"offload_layers={config.offload_k}")
    if config.sync:
        asked.append("sync")
    return ", ".join(asked) or "the default plan"


def _rnn_cause(model: torch.nn.Module | None) -> str | None:
    """Dynamo's own skip of recurrent modules, when the model has one."""
    if model is None or getattr(torch._dynamo.config, "allow_rnn", True):
        return None
    names = [n or type(m).__name__ for n, m in model.named_modules() if isinstance(m, _RNNS)]
    if not names:
        return None
    kinds = sorted({type(m).__name__ for m in model.modules() if isinstance(m, _RNNS)})
    return (
        f"Dynamo does not trace {'/'.join(f'nn.{k}' for k in kinds)} (here: "
        f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}) unless "
        "torch._dynamo.config.allow_rnn = True, which unrolls the recurrence (long compiles "
        "for long sequences)"
    )


def nothing_compiled(
    model: torch.nn.Module | None, graphs: int, training_regions: int, config: Any
) -> str | None:
    """The note for a training forward after which memopt has no training region: ``graphs``
    is how many graphs Dynamo handed the backend so far. None when there is a region."""
    if training_regions:
        return None
    name = type(model).__name__ if model is not None else "the model"
    if graphs == 0:
        what = f"torch.compile compiled no graph of {name}'s forward: it ran eagerly"
    else:
        what = (
            f"torch.compile compiled {graphs} graph(s) of {name}'s forward, none of which needs "
            "gradients: what trains ran eagerly"
        )
    return (
        f"{what}, so memopt planned nothing and {_settings(config)} had no effect. {cause(model)}."
    )


def cause(model: torch.nn.Module | None) -> str:
    """The likely reason Dynamo compiled nothing of ``model``: its recurrent modules, else
    where to look."""
    return _rnn_cause(model) or (
        "torch._dynamo.explain(model)(*inputs) lists the graph breaks and skipped frames"
    )
