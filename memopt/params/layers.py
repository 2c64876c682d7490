"""The repeated layers of a model: the unit that streams or becomes one FSDP2 group."""

from __future__ import annotations

from torch import nn


def find_layers(model: nn.Module, prefix: str | None = None) -> list[tuple[str, nn.Module]]:
    """The repeated layers: children of ``prefix`` or of the ModuleList holding most parameters."""
    if prefix is not None:
        try:
            container = model.get_submodule(prefix)
        except AttributeError:
            raise ValueError(f"layers_prefix={prefix!r} names no submodule of the model") from None
        if not isinstance(container, nn.ModuleList | nn.Sequential):
            raise ValueError(
                f"layers_prefix={prefix!r} is a {type(container).__name__}, not a list"
            )
        return [(f"{prefix}.{n}", m) for n, m in container.named_children()]
    best, best_numel = None, -1
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 0:
            numel = sum(p.numel() for p in mod.parameters())
            if numel > best_numel:
                best, best_numel = name, numel
    if best is None:
        raise ValueError("the model has no nn.ModuleList of layers; pass layers_prefix")
    return find_layers(model, best)
