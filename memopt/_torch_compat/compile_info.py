"""What torch.compile is doing now and what it was asked for: its ``mode=`` / ``options=`` as
Inductor settings, compile-cache hits, DDP's graph split, fake-tensor calls, kept graphs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def inductor_mode_options(mode: str) -> dict[str, Any]:
    """The Inductor settings torch.compile's ``mode=`` stands for (ValueError naming the modes
    for an unknown one)."""
    from torch._inductor import list_mode_options

    try:
        return dict(list_mode_options(mode))
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def inductor_setting_names() -> frozenset[str]:
    """Every Inductor config name (what torch.compile's ``options=`` may set)."""
    from torch._inductor import config

    return frozenset(config.get_config_copy())


def compile_cache_hits() -> int:
    """Cache hits of AOTAutograd's and Inductor's compile caches so far (a hit skips the
    partitioner)."""
    from torch._dynamo.utils import counters

    return (
        counters["aot_autograd"]["autograd_cache_hit"] + counters["inductor"]["fxgraph_cache_hit"]
    )


def dynamo_graphs() -> int:
    """Graphs dynamo has compiled so far in this process (its ``unique_graphs`` counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def ddp_split_compile() -> bool:
    """Whether the graph compiling now is one of DistributedDataParallel's buckets (dynamo's
    DDPOptimizer split the model's graph and compiles each piece)."""
    ctx = torch._guards.TracingContext.try_get()
    return ctx is not None and getattr(ctx, "ddp_optimizer_ctx", None) is not None


def fake_call(args: Sequence[Any]) -> bool:
    """Whether a compiled region is called with fake tensors (a compile propagating shapes
    through it, as DDP's graph split does), not by a step: its first tensor argument decides."""
    from torch._subclasses.fake_tensor import FakeTensor

    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return isinstance(first, FakeTensor)


def graph_kept() -> bool:
    """Whether the running backward keeps the graph (``retain_graph`` or ``create_graph``)."""
    return bool(torch._C._autograd._get_current_graph_task_keep_graph())


def placeholder_sources(gm: torch.fx.GraphModule) -> list[str | None]:
    """Per placeholder of a dynamo graph, the source dynamo read it from
    (``L['self']._modules['layers']._modules['0']._parameters['weight']``; None where unknown)."""
    out: list[str | None] = []
    for node in gm.graph.find_nodes(op="placeholder"):
        src = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(src, "name", None)
        name = name() if callable(name) else name
        out.append(name if isinstance(name, str) else None)
    return out
