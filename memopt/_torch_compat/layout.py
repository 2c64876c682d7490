"""Inductor's layout decisions memopt predicts from the graph before Inductor makes them
(private API): which nodes it lays out channels-last, how it pads strides on a GPU, and which
matmuls its post-grad pass folds into an ``addmm``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

log = logging.getLogger("memopt")


def _planning_for_cuda() -> bool:
    from memopt import _torch_compat

    return _torch_compat._PLANNING_FOR_CUDA[0]


def inductor_layout_opt(fw: torch.fx.GraphModule) -> bool:
    """Whether Inductor lays this forward graph out channels-last (its conv heuristic)."""
    from torch._inductor.graph import GraphLowering

    return bool(GraphLowering.decide_layout_opt(fw, is_inference=False))


def inductor_channels_last_nodes(fw: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes of ``fw`` that Inductor's layout optimization lays out channels-last where it
    can: a convolution, and every node one of whose users is in the set (the inputs of a
    convolution, direct or through pointwise ops such as a pad; ``bmm`` stops it), then the
    nodes after them up to the last convolution (``GraphLowering.find_nodes_prefer_channels_last``,
    which reads only the graph)."""
    from types import SimpleNamespace

    from torch._inductor.graph import GraphLowering

    try:  # the same rule in torch 2.11 to 2.14.1; it reads only ``self.module``
        return set(GraphLowering.find_nodes_prefer_channels_last(SimpleNamespace(module=fw)))
    except (AttributeError, TypeError):  # a later torch's signature: the rule's first pass
        found: set[torch.fx.Node] = set()
        for n in reversed(fw.graph.nodes):
            conv = n.target is torch.ops.aten.convolution.default
            if conv or (n.target is not torch.ops.aten.bmm.default and found & set(n.users)):
                found.add(n)
        return found


@dataclass(frozen=True)
class StridePadding:
    """Inductor's comprehensive padding of a graph (GPU graphs; ``config.comprehensive_padding``,
    ``ir.Layout._pad_strides``): a buffer whose layout Inductor chooses gets every stride
    above ``threshold`` elements rounded up to a multiple of ``align_bytes``, except the
    nodes in ``disliked`` (inputs of convolutions, user-visible outputs:
    ``graph.mark_nodes_dislike_padding``)."""

    align_bytes: int
    threshold: int
    disliked: frozenset


def inductor_stride_padding(
    fw: torch.fx.GraphModule, num_user_outputs: int
) -> StridePadding | None:
    """How Inductor will pad ``fw``'s buffers, or None where it pads none (a CPU graph,
    padding turned off); planning for CUDA on fake CPU tensors pads as on CUDA."""
    import torch._inductor.config as iconfig

    cuda = _planning_for_cuda() or any(
        isinstance(v := n.meta.get("val"), torch.Tensor) and v.device.type == "cuda"
        for n in fw.graph.find_nodes(op="placeholder")
    )
    if not cuda or not getattr(iconfig, "comprehensive_padding", False):
        return None
    out = fw.graph.output_node().args[0]
    visible = {
        o: tuple(o.meta["val"].stride())
        for o in out[:num_user_outputs]
        if isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor)
    }
    disliked: set = set()
    try:  # Inductor's own marking, its meta keys put back as they were
        from torch._inductor.graph import mark_nodes_dislike_padding

        before = {n: n.meta.get("dislike_padding") for n in fw.graph.nodes}
        try:
            mark_nodes_dislike_padding(fw.graph, visible)
            disliked = {n for n in fw.graph.nodes if n.meta.get("dislike_padding")}
        finally:
            for n, v in before.items():
                if v is None:
                    n.meta.pop("dislike_padding", None)
                else:
                    n.meta["dislike_padding"] = v
    except Exception as e:  # a torch that moved it: user outputs and conv inputs by hand
        log.debug("memopt: Inductor's padding marks unavailable (%s)", e)
        conv = torch.ops.aten.convolution.default
        disliked = set(visible) | {a for n in fw.graph.find_nodes(op="call_function", target=conv)
                                   for a in n.all_input_nodes}  # fmt: skip
    return StridePadding(
        int(getattr(iconfig, "padding_alignment_bytes", 128)),
        int(getattr(iconfig, "padding_stride_threshold", 1024)),
        frozenset(disliked),
    )


def expandable_to(shape: Sequence[Any], desired: Sequence[Any]) -> bool:
    """``torch._prims_common.is_expandable_to`` (broadcasting ``shape`` to ``desired``)."""
    try:
        from torch._prims_common import is_expandable_to

        return bool(is_expandable_to(shape, desired))
    except Exception:  # a symbolic size it cannot decide: not fused, as Inductor's guard
        return False


def is_gpu(device: torch.device) -> bool:
    """Inductor's GPU device types (CUDA, XPU, ...); planning for CUDA counts as one."""
    from torch._inductor.utils import is_gpu as inductor_is_gpu

    return bool(inductor_is_gpu(device.type)) or _planning_for_cuda()


def is_pointwise_use(use: torch.fx.Node) -> bool:
    """``torch._inductor.utils.is_pointwise_use``: a pointwise op, or a view all of whose uses
    are."""
    from torch._inductor.utils import is_pointwise_use as rule

    return bool(rule(use))


def forced_layout_optimization() -> Any:
    """A context in which Inductor lays out every graph with a convolution channels-last
    (tests: its GPU heuristic skips small convolutions)."""
    import torch._inductor.config as iconfig

    return iconfig.patch(force_layout_optimization=True)
