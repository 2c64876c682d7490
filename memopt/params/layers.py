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


def find_output_head(
    model: nn.Module, layers: list[tuple[str, nn.Module]]
) -> list[tuple[str, nn.Module]]:
    """The model's output head (``get_output_embeddings()``, e.g. an LLM's ``lm_head``) as a
    group of its own, or nothing: when the model has none, when it sits inside a layer, or when
    its weight is tied to a parameter outside it (the input embedding). As its own FSDP2 group
    its gradient is reduced right after its backward, early in the backward pass, instead of
    with the root group's at the end."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if not isinstance(head, nn.Module) or not any(True for _ in head.parameters()):
        return []
    name = next((n for n, m in model.named_modules() if m is head), None)
    if not name or any(name == n or name.startswith(n + ".") for n, _ in layers):
        return []
    own = {id(p) for p in head.parameters()}
    for pname, p in model.named_parameters(remove_duplicate=False):
        if id(p) in own and not pname.startswith(name + "."):
            return []  # tied: the parameter is also the input embedding's
    return [(name, head)]
