"""When a region's copy-back starts in the backward: after the hooks other engines put on the
region's outputs. FSDP2's pre-backward hook (a multi-grad hook on a module's outputs) queues its
all-gather copy-out, with small host-to-device copies, on the compute stream; a copy-back queued
before it holds the copy engine and the compute stream waits (measured: +18% step time at world
size 2 on two H200s, docs/benchmarks.md "Offload at world 2: where the time goes")."""

from __future__ import annotations

import torch

from memopt import regions


def _order(node: bool) -> list[str]:
    x = torch.ones(4, requires_grad=True)
    out = (x * 2).split(2)  # two outputs of one autograd node, as a compiled region's
    seen: list[str] = []
    regions._on_backward(out, lambda: seen.append("memopt"), node=node)
    # as FSDP2 does in its post-forward, after the region's call returned
    torch.autograd.graph.register_multi_grad_hook(
        out, lambda grads: seen.append("fsdp"), mode="any"
    )
    (out[0].sum() + out[1].sum()).backward()
    return seen


def test_node_hook_runs_after_the_output_hooks():
    assert _order(node=True) == ["fsdp", "memopt"]
    assert _order(node=False) == ["memopt", "fsdp"]  # the state's measurement point


def test_node_hook_on_a_leaf_output_falls_back_to_a_tensor_hook():
    x = torch.ones(3, requires_grad=True)
    seen: list[str] = []
    regions._on_backward((torch.zeros(2), x), lambda: seen.append("memopt"), node=True)
    (x * 2).sum().backward()
    assert seen == ["memopt"]
