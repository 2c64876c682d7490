"""Which tensors of a partitioned graph occupy memory: the rules of ``memopt plan``'s liveness
model (:mod:`memopt.cli.liveness`), measured within 10% of the H100's peak. The budget
planner's liveness sweep (:mod:`memopt.passes.build_planning_problem`) still charges every
temporary: on the 8-layer Llama of benchmarks/pareto.py it predicts 8.01 GiB for the
unoptimized step against 7.15 GiB measured. With these rules and the backward's tangents it
predicts 6.06 GiB, exactly ``memopt plan``'s figure, but both then miss about 1 GiB on Llama
configs (TinyLlama: 1.04 GiB of 31.7) that is not identified yet; the planner keeps its
conservative sweep until that term is found and measured.

Views and ops that return an alias of an input allocate nothing (their bytes belong to the
tensor they alias). A temporary that Inductor fuses away takes no memory: a tensor must exist
in memory only when the op that makes it, or one that reads it, is an extern kernel (matmul,
attention, convolution, an unknown op), or when two padded matmul operands copy it.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt.passes.find_saved_activations import is_view_op

_FUSIBLE_NAMES = frozenset(
    {
        "_to_copy",
        "clone",
        "full",
        "full_like",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "empty",
        "empty_like",
        "scalar_tensor",
        "iota",
        "arange",
        "cat",
        "gather",
        "embedding",
        "index",
        "index_select",
        "constant_pad_nd",
        "slice_scatter",
        "select_scatter",
        "where",
        "copy",
        "lift_fresh_copy",
    }
)


def fusible(node: torch.fx.Node) -> bool:
    """Whether Inductor lowers the op into its own kernels (so temporaries may fuse away)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and fusible(src)
    if is_view_op(node):
        return True
    tags = getattr(node.target, "tags", ())
    if torch.Tag.pointwise in tags or torch.Tag.reduction in tags:
        return True
    return getattr(node.target, "__name__", "").split(".")[0] in _FUSIBLE_NAMES


def aliased_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """The input ``node``'s output aliases: views, and ops whose schema returns ``Tensor(a)``."""
    if node.op != "call_function":
        return None
    if is_view_op(node):
        src = node.args[0] if node.args else None
        return src if isinstance(src, torch.fx.Node) else None
    if not compat.op_returns_alias(node.target):
        return None
    src = node.args[0] if node.args else None
    return src if isinstance(src, torch.fx.Node) else None


def root(node: torch.fx.Node) -> torch.fx.Node:
    """The node that owns the memory ``node`` aliases."""
    for _ in range(64):
        src = aliased_input(node)
        if src is None:
            break
        node = src
    return node


def must_exist(node: torch.fx.Node, alias_users: list[torch.fx.Node]) -> bool:
    if not fusible(node):
        return True
    if any(u.op == "call_function" and not fusible(u) for u in alias_users):
        return True
    # a value copied into two padded matmul operands is written once and read by the copies
    # (the LM head's gradient on CUDA), not recomputed in each
    pads = [u for u in alias_users if is_pad_for_matmul(u)]
    return len(pads) >= 2


def is_pad_for_matmul(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and getattr(node.target, "__name__", "").split(".")[0] == "constant_pad_nd"
        and any(u.op == "call_function" and not fusible(u) for u in node.users)
    )


def alias_users(node: torch.fx.Node) -> list[torch.fx.Node]:
    out, stack, seen = [], list(node.users), set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        out.append(u)
        if aliased_input(u) is not None and root(u) is root(node):
            stack.extend(u.users)
    return out
