"""detect_layers_pass: find the model's repeated layers and tag every node with its layer.

Reads ``node.meta["nn_module_stack"]`` (forward nodes, and forward nodes recomputed in a
backward graph) or else ``node.meta["fwd_nn_module_stack"]`` (backward nodes). Writes
``node.meta[LAYER]``: the index of the node's layer in the returned list, or None.

A layer is a child of a ``ModuleList``/``Sequential``: a module path whose last component is
an integer (``model.layers.3``, ``transformer.h.3``). Without a ``prefix`` the container with
the most children seen in the graph wins (for nested lists, only the outermost integer path
of each node counts, so MoE experts inside ``model.layers.i`` never beat the layers), and
every other container of the same attribute name joins it: an encoder-decoder's two stacks
(``model.encoder.layers`` and ``model.decoder.layers``; T5's ``encoder.block`` and
``decoder.block``), not a convolutional front end's ``conv_layers``. ``prefix="model.layers"``
forces one container.

Layers are numbered in forward order: the containers in the order the forward runs them
(an encoder's layers, then the decoder's), each one's children by their integer index, so
``offload_layers=k`` and a sync dict's layer indices count over both stacks
(``model.encoder.layers.0`` is 0, ``model.decoder.layers.0`` is the encoder's layer count). A
forward graph and its backward graph tagged separately agree.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch.fx

from memopt import meta_keys as mk

#: the source dynamo names the traced module by: ``L['self']``, ``L['args'][0]`` (a decorated
#: ``forward`` in transformers >= 5.24), ``L['kwargs']['model']``, ``G['net']``
_LOCAL = re.compile(r"^[LG]\[[^\]]*\](\[[^\]]*\])*\.?")
#: path components that wrappers insert and users do not write; ``__dict__`` and ``_modules``:
#: dynamo's source for a module reached past a ``__getattr__`` of its own (diffusers'
#: ``ModelMixin``: ``L['self'].__dict__['_modules']['blocks'][0]``)
_WRAPPERS = frozenset(
    {"_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module", "__dict__", "_modules"}
)
_SUBSCRIPT = re.compile(r"\[['\"]?([A-Za-z0-9_]+)['\"]?\]")
_GETATTR = re.compile(r"getattr\((.*?), ['\"]([A-Za-z0-9_]+)['\"]\)")


@functools.lru_cache(maxsize=1 << 16)  # every node of every graph asks: paths repeat
def normalize_module_path(path: str) -> str:
    """``L['self'].model.layers[3]`` / ``L['args'][0].model.layers._modules['3']`` ->
    ``model.layers.3``: relative to the module that was compiled, whatever source dynamo
    names it by, without wrapper components (``_orig_mod``, ``_checkpoint_wrapped_module``)."""
    p = path.strip()
    for _ in range(8):
        q = _GETATTR.sub(r"\1.\2", p)
        if q == p:
            break
        p = q
    p = _LOCAL.sub("", p)
    p = _SUBSCRIPT.sub(r".\1", p)
    p = p.replace("._modules.", ".")
    return ".".join(c for c in p.strip(".").split(".") if c not in _WRAPPERS)


def _stack_paths(node: torch.fx.Node) -> list[str]:
    stack = node.meta.get(mk.TORCH_MODULE_STACK) or node.meta.get(mk.TORCH_FWD_MODULE_STACK)
    if not stack:
        return []
    out = []
    for value in stack.values():
        path = value[0] if isinstance(value, tuple | list) else value
        if isinstance(path, str):
            out.append(normalize_module_path(path))
    return out


def _split_layer(path: str) -> tuple[str, int] | None:
    head, _, last = path.rpartition(".")
    # a weight's parametrizations (weight_norm: ``conv.parametrizations.weight.0``) are a
    # ModuleList of transforms, no layers
    if head and last.isdigit() and "parametrizations" not in head.split("."):
        return head, int(last)
    return None


def _layer_of(paths: list[str], prefix: str | None) -> tuple[str, int] | None:
    """The (container, index) of the outermost layer in a node's module stack."""
    for p in paths:
        if prefix is not None:
            if not p.startswith(prefix + "."):
                continue
            first = p[len(prefix) + 1 :].split(".")[0]
            if first.isdigit():
                return prefix, int(first)
            continue
        found = _split_layer(p)
        if found is not None:
            return found
    if prefix is None:  # a layer run as ``layer.forward(...)`` is on no stack: its children are
        for p in paths:  # (SqueezeBERT's encoder; the third sweep)
            parts = p.split(".")
            for i in range(2, len(parts) + 1):
                found = _split_layer(".".join(parts[:i]))
                if found is not None:
                    return found
    return None


def _forward_order(nodes: list[torch.fx.Node], found: dict) -> dict[str, tuple]:
    """A sort key per container: where its first forward node sits (nodes with
    ``nn_module_stack``); in a backward graph alone, the reverse of where its last node sits
    (the backward runs the stacks in reverse)."""
    key: dict[str, tuple] = {}
    for i, node in enumerate(nodes):
        hit = found.get(node)
        if hit is None:
            continue
        if node.meta.get(mk.TORCH_MODULE_STACK):
            key.setdefault(hit[0], (0, i))
        elif key.get(hit[0], (1,))[0] == 1:
            key[hit[0]] = (1, -i)
    return key


def _containers(children: dict[str, set[int]], order: dict[str, tuple]) -> list[str]:
    """The container with the most children (ties: the first run) and every container of the
    same attribute name, in forward order."""
    ranked = sorted(children, key=lambda c: (-len(children[c]), order[c]))
    if not ranked:
        return []
    name = ranked[0].rpartition(".")[2]
    return sorted((c for c in ranked if c.rpartition(".")[2] == name), key=order.__getitem__)


def detect_layers_pass(
    gm: torch.fx.GraphModule,
    prefix: str | None = None,
    model_layers: Sequence[str] = (),
    frame: str = "",
) -> list[str]:
    """Tag ``node.meta[LAYER]`` and return the layer names (``model.layers.0``, ...) in forward
    order (see the module docstring).

    ``prefix`` (e.g. ``"model.encoder.layers"``) selects one container; otherwise the
    container with the most distinct children and those of its attribute name. Returns []
    when there is none. ``model_layers``: the model's layers as ``memopt.optimize`` counts
    them (in order). Where the graph's repeated modules are none of them but some of its nodes
    run inside them, those are its layers: MobileViT's blocks differ in type, and its layers
    are the lists inside them (sweep 4). ``frame``: the model's path of the module whose
    frame dynamo compiled (:func:`frame_prefix`); the graph's module paths start there, the
    names returned are the model's.
    """
    local = {rel: n for n in model_layers if (rel := _within(n, frame)) is not None}
    if prefix is not None:
        prefix = _within(normalize_module_path(prefix), frame) or normalize_module_path(prefix)
    layers = _detect(list(gm.graph.nodes), prefix)
    names = [local.get(n) or ".".join(filter(None, (frame, n))) for n in layers[0]]
    if prefix is None and local and not set(names) & set(model_layers):
        inner = _inside(layers[1], list(local))
        if inner[0]:
            layers = inner
            names = [local[n] for n in inner[0]]
    for node, k in layers[1].items():
        node.meta[mk.LAYER] = k
    return names


def _within(path: str, frame: str) -> str | None:
    """``path`` (the model's) from ``frame`` on; None when it is not inside ``frame``."""
    if not frame:
        return path
    return path[len(frame) + 1 :] if path.startswith(frame + ".") else None


def frame_prefix(
    sources: Sequence[str | None], inputs: Sequence[Any], names: dict[int, str]
) -> str:
    """The model's path of the module whose frame dynamo compiled: '' for the model's own
    ``forward``; ``inner`` for a graph of ``model.inner.forward`` (a graph break inside it made
    the frame a region of its own: LED's encoder, Llava's language model). Each weight the
    graph reads tells it: its name in the model (``names``: ``id`` of the tensor -> name) ends
    with its path in the frame (``sources``: dynamo's, per graph input); the most common wins."""
    votes: Counter[str] = Counter()
    for src, x in zip(sources, inputs):
        full = names.get(id(x))
        if full is None or src is None:
            continue
        rel = ".".join(c for c in normalize_module_path(src).split(".") if c not in _HOLDERS)
        if full == rel or full.endswith("." + rel):
            votes[full[: len(full) - len(rel)].rstrip(".")] += 1
    return votes.most_common(1)[0][0] if votes else ""


#: components of a weight's source that hold it in its module (``_parameters['weight']``)
_HOLDERS = frozenset({"_parameters", "_buffers"})


def _detect(nodes: list[torch.fx.Node], prefix: str | None) -> tuple[list[str], dict]:
    """The layer names and each node's layer index (None outside them); ``prefix``
    normalized."""
    found: dict[torch.fx.Node, tuple[str, int]] = {}
    children: dict[str, set[int]] = {}
    for node in nodes:
        hit = _layer_of(_stack_paths(node), prefix)
        if hit is not None:
            found[node] = hit
            children.setdefault(hit[0], set()).add(hit[1])
    if prefix is not None:
        containers = [prefix] if prefix in children else []
    else:
        containers = _containers(children, _forward_order(nodes, found))
    names = [(c, i) for c in containers for i in sorted(children[c])]
    position = {layer: k for k, layer in enumerate(names)}
    tags = {n: position.get(found[n]) if n in found else None for n in nodes}
    return [f"{c}.{i}" for c, i in names], tags


def _inside(tags: dict, model_layers: Sequence[str]) -> tuple[list[str], dict]:
    """Each node's model layer: the outermost of ``model_layers`` its module stack runs in."""
    index = {name: i for i, name in enumerate(model_layers)}
    hit: dict[torch.fx.Node, int] = {}
    for node in tags:
        for path in _stack_paths(node):
            parts = path.split(".")
            i = next(
                (index[q] for j in range(1, len(parts) + 1) if (q := ".".join(parts[:j])) in index),
                None,
            )
            if i is not None:
                hit[node] = i
                break
    present = sorted(set(hit.values()))
    position = {i: k for k, i in enumerate(present)}
    return [model_layers[i] for i in present], {n: position.get(hit.get(n)) for n in tags}
