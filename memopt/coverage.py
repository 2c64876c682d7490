"""Whether torch.compile compiled anything of the optimized model's training step.

memopt plans what torch.compile compiles for training. When Dynamo traces none of the
model's forward (it skips the frame: an ``nn.LSTM`` without ``allow_rnn``, an unsupported
construct at the top), or compiles only graphs that need no gradients, the step runs eagerly and
no setting (level, plan strings, budget, offload) applies. That is said once, after the first
forward that trains, as a warning and a line in the report, with the likely cause. So is a
model whose other code compiled while its layers ran eagerly (Dynamo skipped their frames: HF
gradient checkpointing under transformers 5, whose checkpointed forward has side effects Dynamo
cannot replay): the settings then reach only what compiled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

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
    return (
        _rnn_cause(model)
        or _checkpoint_cause(model)
        or "torch._dynamo.explain(model)(*inputs) lists the graph breaks and skipped frames"
    )


def module_paths(gm: torch.fx.GraphModule) -> set[str]:
    """Every module path (normalized, relative to the compiled module) that a graph Dynamo
    handed the backend holds a node of, its higher-order ops' subgraphs (checkpointed layers)
    included, with every prefix of each path."""
    from memopt.passes.detect_layers import _stack_paths

    out: set[str] = set()
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            for node in sub.graph.nodes:
                for path in _stack_paths(node):
                    parts = path.split(".")
                    out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return out


def _checkpoint_cause(model: torch.nn.Module | None) -> str | None:
    """Gradient checkpointing, when the model's layers carry it (HF's
    ``gradient_checkpointing_enable``, torch's checkpoint wrapper)."""
    if model is None or not any(
        getattr(m, "gradient_checkpointing", False) is True
        or type(m).__name__ == "CheckpointWrapper"
        for m in model.modules()
    ):
        return None
    return (
        "The model checkpoints its layers (gradient checkpointing is on), and Dynamo may not "
        "trace a checkpointed forward (TORCH_LOGS=graph_breaks says why). memopt's recompute "
        "plans do what checkpointing does, inside the compiled graph: turn checkpointing off "
        "(model.gradient_checkpointing_disable()) and use level=1 or a budget"
    )


def _spans(layers: Sequence[str], idx: Sequence[int]) -> str:
    """Runs of ``layers[i]`` for ``i`` in ``idx``: ``model.layers.0-3, model.layers.6``."""
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    out = []
    for r in runs:
        first, last = layers[r[0]], layers[r[-1]]
        head, _, tail = last.rpartition(".")
        same = len(r) > 1 and first.startswith(head + ".")
        out.append(first if len(r) == 1 else f"{first}-{tail}" if same else f"{first}-{last}")
    return ", ".join(out)


def uncompiled_layers(
    model: torch.nn.Module,
    layers: Sequence[str],
    paths: set[str],
    storages: set[Any],
    storage_of: Any,
) -> dict[int, list[torch.nn.Parameter]]:
    """The model's ``layers`` (normalized paths; by index) that no compiled graph holds after
    the first training forward: neither a graph's module paths (``paths``, from
    :func:`module_paths`) nor its inputs or runs (``storages``: storage keys by
    ``storage_of``) hold them; with their weights that train. Such a layer ran eagerly, or did
    not run (LayerDrop, a layer the model skips): which, its weights' gradients tell. Empty
    when the model's parameters are not its own tensors while it runs (FSDP2 swaps in gathered
    ones)."""
    sharded = ("FSDP", "FullyShardedDataParallel")
    if not layers or any(type(m).__name__.startswith(sharded) for m in model.modules()):
        return {}
    from memopt.passes.detect_layers import normalize_module_path

    modules = {normalize_module_path(n): m for n, m in model.named_modules()}
    out = {}
    for i, name in enumerate(layers):
        mod = modules.get(name)
        if mod is None or name in paths:
            continue
        weights = [p for p in mod.parameters() if p.requires_grad]
        keys = {storage_of(p) for p in weights} - {None}
        if keys and not keys & storages:  # a layer without weights cannot be told apart
            out[i] = weights
    return out


def eager_layers_note(
    model: torch.nn.Module, layers: Sequence[str], eager: Sequence[int], config: Any
) -> str:
    """The note for the model's ``layers[i]``, ``i`` in ``eager``, that ran eagerly."""
    what = (
        f"{len(eager)} of the model's {len(layers)} layers ({_spans(layers, sorted(eager))}) "
        f"{'is' if len(eager) == 1 else 'are'} in no graph torch.compile compiled: "
        f"{'it' if len(eager) == 1 else 'they'} ran eagerly, so {_settings(config)} reached "
        "only the rest of the model"
    )
    return f"{what}. {cause(model)}."
