"""PyTorch's native activation offload (torch >= 2.10), set up for one ``torch.compile``: the
peer that benchmarks/zoo_gpu.py measures memopt against.

With ``torch._functorch.config.enable_activation_offloading`` on, the partitioner moves to the
CPU the forward nodes whose ``node.meta["should_offload"]`` is true and that it saves for
backward (no model outputs, views, getitems or non-contiguous tensors: torch's
``can_offload``), and reloads them before their first use in backward. Nothing sets the tag by
itself: :func:`tag_pass` is a ``joint_custom_pass`` that tags, on the joint graph before it is
partitioned, every forward node whose tensor is at least ``min_bytes`` (views and getitems
left out, as torch would refuse them), optionally only inside some layers
(:func:`first_half_layers`). :class:`NativeOffload` sets the config flags for as long as it
is entered, restores them after, and counts what was tagged and what the partitioner then
marked ``saved_for_offloading`` (the tensors actually offloaded)::

    with NativeOffload(min_bytes=2**20) as native:
        compiled = torch.compile(model)
        loss = compiled(x).sum()  # compiles here: the joint pass runs
        loss.backward()
    native.facts()  # {"tagged": ..., "tagged_bytes": ..., "offloaded": ..., ...}

``separate_stream=True`` copies on a side stream (``activation_offload_separate_stream``),
``prefetch=True`` moves reloads earlier in backward (``activation_reload_prefetch``; only with
the side stream); the offload wait is never sunk to the end of the forward graph
(``activation_offload_sink_wait``: on a whole-model graph it keeps every offloaded tensor on
the GPU until the forward ends). ``memory_budget`` also sets torch's min-cut recompute budget
(``activation_memory_budget``): recompute first, offload the largest survivors (torchtitan's
policy).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx

MIB = 2**20
#: the module whose ``enable_activation_offloading`` the partitioners call
_AO_MODULE = "torch._functorch._activation_offloading.activation_offloading"


@dataclass
class Counts:
    """What the joint pass tagged and what the partitioner offloaded, over every graph."""

    graphs: int = 0  # joint graphs the pass saw
    tagged: int = 0
    tagged_bytes: int = 0
    partitions: int = 0  # forward/backward pairs torch's offload step saw (None: not hooked)
    offloaded: int = 0
    offloaded_bytes: int = 0
    layers: list[str] = field(default_factory=list)  # where tags were allowed ([]: anywhere)


def node_bytes(node: torch.fx.Node) -> int:
    """Bytes of a node's tensor value (0 for anything else); symbolic sizes by their hint."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    n = val.numel()
    try:
        n = int(n)
    except (TypeError, ValueError, RuntimeError):
        from torch.fx.experimental.symbolic_shapes import hint_int

        n = hint_int(n, fallback=0)
    return n * val.element_size()


def backward_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Nodes of the joint graph that belong to backward: tagged so by AOTAutograd
    (``partitioner_tag``) or fed by a tangent."""
    out: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        tangent = node.op == "placeholder" and node.name.startswith("tangents")
        if (
            tangent
            or node.meta.get("partitioner_tag") == "is_backward"
            or any(a in out for a in node.all_input_nodes)
        ):
            out.add(node)
    return out


def _is_view(node: torch.fx.Node) -> bool:
    return node.target is operator.getitem or bool(getattr(node.target, "is_view", False))


def _module_paths(node: torch.fx.Node) -> list[str]:
    from memopt.passes.detect_layers import normalize_module_path

    out = []
    for value in (node.meta.get("nn_module_stack") or {}).values():
        path = value[0] if isinstance(value, tuple | list) else value
        if isinstance(path, str):
            out.append(normalize_module_path(path))
    return out


def _in_layers(node: torch.fx.Node, layers: Iterable[str]) -> bool:
    paths = _module_paths(node)
    return any(p == q or p.startswith(q + ".") for p in paths for q in layers)


def tag_pass(
    min_bytes: int = MIB,
    layers: Iterable[str] | None = None,
    counts: Counts | None = None,
) -> Callable[[torch.fx.GraphModule, Any], torch.fx.GraphModule]:
    """A ``joint_custom_pass``: ``should_offload`` on every forward ``call_function`` node
    whose tensor is at least ``min_bytes`` (not a view or getitem), and, with ``layers``
    (module paths such as ``model.layers.0``), only on nodes inside one of them. Adds what it
    tags to ``counts``."""
    layers = None if layers is None else tuple(layers)
    counts = counts if counts is not None else Counts()

    def joint_pass(gm: torch.fx.GraphModule, joint_inputs: Any) -> torch.fx.GraphModule:
        counts.graphs += 1
        bwd = backward_nodes(gm)
        for node in gm.graph.nodes:
            if node.op != "call_function" or node in bwd or _is_view(node):
                continue
            size = node_bytes(node)
            if size < min_bytes or (layers is not None and not _in_layers(node, layers)):
                continue
            node.meta["should_offload"] = True
            counts.tagged += 1
            counts.tagged_bytes += size
        return gm

    joint_pass.counts = counts  # type: ignore[attr-defined]
    return joint_pass


def layer_paths(model: torch.nn.Module) -> list[str]:
    """The model's repeated layers as memopt numbers them (passes/detect_layers.py): the
    container with the most children and every container of the same attribute name
    (an encoder's ``layers`` and a decoder's), in module order, each one's children in order;
    containers inside another one are left out."""
    from memopt.api import _layer_containers

    found = _layer_containers(model)
    outer = {p: n for p, n in found.items() if not any(p.startswith(q + ".") for q in found)}
    if not outer:
        return []
    top = max(outer, key=lambda p: (outer[p], -list(outer).index(p)))
    name = top.rpartition(".")[2]
    return [f"{p}.{i}" for p, n in outer.items() if p.rpartition(".")[2] == name for i in range(n)]


def first_half_layers(model: torch.nn.Module) -> list[str]:
    """The first half of :func:`layer_paths` (as ``memopt offload_layers=k``, k = half)."""
    paths = layer_paths(model)
    return paths[: len(paths) // 2]


def _flags(separate_stream: bool, prefetch: bool, memory_budget: float | None) -> dict:
    flags = {
        "enable_activation_offloading": True,
        "activation_offload_separate_stream": separate_stream,
        "activation_offload_sink_wait": False,
        "activation_reload_prefetch": prefetch,
    }
    if memory_budget is not None:
        flags["activation_memory_budget"] = memory_budget
    return flags


class NativeOffload:
    """Torch's native activation offload for the compiles run while it is entered (see the
    module docstring); :meth:`facts` says what it set, tagged and offloaded."""

    def __init__(
        self,
        *,
        min_bytes: int = MIB,
        layers: Iterable[str] | None = None,
        separate_stream: bool = False,
        prefetch: bool = False,
        memory_budget: float | None = None,
    ):
        self.min_bytes = min_bytes
        self.counts = Counts(layers=list(layers) if layers is not None else [])
        self.layers = None if layers is None else tuple(layers)
        self.flags = _flags(separate_stream, prefetch, memory_budget)
        self.missing: list[str] = []  # flags this torch lacks (not set)
        self._saved: list[tuple[Any, str, Any]] = []
        self.hooked = False

    def __enter__(self) -> NativeOffload:
        import importlib

        import torch._functorch.config as fconfig

        if not hasattr(fconfig, "enable_activation_offloading"):
            raise RuntimeError(f"torch {torch.__version__} has no native activation offload")
        values = dict(self.flags)
        previous = fconfig.joint_custom_pass
        ours = tag_pass(self.min_bytes, self.layers, self.counts)

        def joint_pass(gm, joint_inputs):
            if callable(previous):
                gm = previous(gm, joint_inputs)
            return ours(gm, joint_inputs)

        values["joint_custom_pass"] = joint_pass
        for name, value in values.items():
            if not hasattr(fconfig, name):
                self.missing.append(name)
                continue
            self._saved.append((fconfig, name, getattr(fconfig, name)))
            setattr(fconfig, name, value)
        try:
            ao = importlib.import_module(_AO_MODULE)
        except ImportError:
            ao = None
        if ao is not None and callable(getattr(ao, "enable_activation_offloading", None)):
            self._saved.append(
                (ao, "enable_activation_offloading", ao.enable_activation_offloading)
            )
            ao.enable_activation_offloading = self._counting(ao.enable_activation_offloading)
            self.hooked = True
        return self

    def __exit__(self, *exc) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)

    def _counting(self, offload: Callable) -> Callable:
        """torch's offload step, then a count of the forward nodes it offloaded."""
        counts = self.counts

        def enable_activation_offloading(fwd_module, *args, **kwargs):
            out = offload(fwd_module, *args, **kwargs)
            counts.partitions += 1
            for node in fwd_module.graph.nodes:
                if node.meta.get("saved_for_offloading"):
                    counts.offloaded += 1
                    counts.offloaded_bytes += node_bytes(node)
            return out

        return enable_activation_offloading

    def facts(self) -> dict[str, Any]:
        """For a benchmark row: flags set, tagged and offloaded counts and bytes (offloaded
        ``None`` when torch's offload step could not be watched)."""
        out = asdict(self.counts)
        if not self.hooked or (self.counts.graphs and not self.counts.partitions):
            # not watched (this torch calls its offload step by another name)
            out["partitions"] = out["offloaded"] = out["offloaded_bytes"] = None
        out["min_bytes"] = self.min_bytes
        out["flags"] = {k: v for k, v in self.flags.items() if k not in self.missing}
        if self.missing:
            out["flags_missing"] = list(self.missing)
        return out
