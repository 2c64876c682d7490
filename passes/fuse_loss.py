"""fuse_loss_pass: a linear layer feeding ``cross_entropy`` becomes one fused op
(:class:`memopt.fused_loss.LinearCrossEntropy`), on dynamo's graph before AOT autograd.

Matched: ``F.cross_entropy(x, target, ignore_index=, reduction="mean" | "sum")`` with no class
weights and no label smoothing, an integer target, where ``x`` is a ``linear(h, weight[,
bias])`` output through only casts to float32, ``contiguous`` and views that flatten its
leading dimensions (``logits.float().view(-1, vocab)``, transformers' causal-LM loss). The
casts and views between the two may have no other users; the linear output may (a model that
returns its logits): the fused op then reads those logits instead of computing them again.
Every ``cross_entropy`` left unfused is named with the reason, for the user's warning.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from memopt.fused_loss import LinearCrossEntropy, chunk_count
from memopt.passes.detect_layers import _stack_paths

_CE_ARGS = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
            "label_smoothing")  # fmt: skip
_LINEAR = (torch._C._nn.linear, F.linear)
_ADD = (operator.add, torch.add)
_CHAIN_METHODS = frozenset({"float", "to", "view", "reshape", "contiguous"})


@dataclasses.dataclass(frozen=True)
class FusedLoss:
    """One fused linear layer and cross-entropy (sizes at the compile's example inputs)."""

    module: str  # the linear layer's module path ("lm_head"), or its node's name
    tokens: int
    hidden: int
    vocab: int
    chunks: int
    reduction: str
    logits_reused: bool  # the graph returns the logits: read, not computed again
    dtype: str
    #: where the graph returns the logits: their output index (returned detached), the
    #: layer's input's extra output index, the weight's and bias's input indices
    #: (:func:`memopt.fused_loss.reattach` puts their gradient back outside the graph)
    outputs: dict | None = None

    def text(self) -> str:
        how = ("reads the logits the model returns" if self.logits_reused
               else "computes the logits chunk by chunk")  # fmt: skip
        return (
            f"Fused loss: {self.module} ({self.hidden:,} -> {self.vocab:,}, {self.dtype}) and its "
            f"cross-entropy ({self.reduction}) over {self.tokens:,} tokens in {self.chunks} "
            f"chunk(s): the forward {how} and computes the layer's gradients; the backward "
            f"keeps those ({self.tokens:,} x {self.hidden:,} and {self.vocab:,} x "
            f"{self.hidden:,}), neither the logits nor their float32 softmax."
        )


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _hint(n: Any) -> int:
    if isinstance(n, torch.SymInt):
        return int(n.node.hint) if n.node.hint is not None else 0
    return int(n)


def _ce_args(node: torch.fx.Node) -> dict[str, Any]:
    got = dict(zip(_CE_ARGS, node.args))
    got.update(node.kwargs)
    return got


def _chain(x: Any) -> tuple[list[torch.fx.Node], Any]:
    """The casts and views from ``x`` back to what they start at (nearest first)."""
    chain = []
    while isinstance(x, torch.fx.Node) and x.op == "call_method" and x.target in _CHAIN_METHODS:
        to = (*x.args[1:], *x.kwargs.values())
        if x.target == "to" and not all(a == torch.float32 for a in to):
            break  # a device move or another dtype
        chain.append(x)
        x = x.args[0]
    return chain, x


def _split_bias(head: Any) -> tuple[Any, Any]:
    """``head`` as (the linear layer's node, a constant bias added to its output or None):
    ``linear(h, W) + final_logits_bias`` (BART, mBART, Pegasus, Marian) is fused too when the
    added tensor needs no gradient and is one row of the vocabulary."""
    if not (isinstance(head, torch.fx.Node) and len(head.args) == 2 and not head.kwargs):
        return head, None
    if not (head.target in _ADD or (head.op == "call_method" and head.target == "add")):
        return head, None
    for a, b in (head.args, head.args[::-1]):
        lin, extra = _value(a), _value(b)
        if not (isinstance(a, torch.fx.Node) and a.target in _LINEAR and len(a.users) == 1):
            continue
        if isinstance(extra, torch.Tensor) and not extra.requires_grad and lin is not None:
            if extra.numel() == extra.shape[-1] == lin.shape[-1]:
                return a, b
    return head, None


def _why_not(ce: torch.fx.Node, args: dict, chain: list, head: Any, lin: Any) -> str | None:
    """Why ``ce`` cannot be fused, or None (``head``: the logits' node, ``lin`` or its sum
    with a constant bias)."""
    if args.get("weight") is not None or args.get("size_average") is not None:
        return "it has class weights or the legacy size_average"
    if args.get("reduce") is not None or args.get("reduction", "mean") not in ("mean", "sum"):
        return f"its reduction is {args.get('reduction')!r} (only 'mean' and 'sum' fuse)"
    if args.get("label_smoothing", 0.0) not in (0, 0.0):
        return "it smooths its labels"
    if not isinstance(args.get("ignore_index", -100), int):
        return "its ignore_index is not a constant"
    x, t = _value(args["input"]), _value(args["target"])
    if x is None or t is None or x.dim() != 2 or t.dim() != 1 or t.is_floating_point():
        return "its input is not (tokens, classes) with integer class targets"
    if not (isinstance(lin, torch.fx.Node) and lin.op == "call_function" and lin.target in _LINEAR):
        if not isinstance(lin, torch.fx.Node):
            return f"its input is not a linear layer's output but {lin!r}"
        if lin.op == "placeholder":
            what = "a graph input: the logits come from another compiled graph (a graph break?)"
        else:
            what = f"{getattr(lin.target, '__name__', lin.target)}'s result"
        return (f"its input is not a linear layer's output through casts and views but "
                f"{lin.name!r} ({what})")  # fmt: skip
    if any(len(c.users) != 1 for c in chain):
        return "the casts or views between the linear layer and the loss have other users"
    others = [u for u in head.users if u not in chain and u is not ce]
    if any(u.op != "output" for u in others):
        return f"the linear layer's output {head.name!r} has other users in the graph"
    params = [lin.args[1], *lin.args[2:3], lin.kwargs.get("bias")]
    if others and not isinstance(ce.graph.output_node().args[0], tuple | list):
        return "the graph returns its logits alone"
    if others and any(isinstance(p, torch.fx.Node) and p.op != "placeholder" for p in params):
        return "the graph returns the logits and the layer's weight is not a graph input"
    w, out = _value(lin.args[1]), _value(lin)
    if w is None or out is None or w.dim() != 2 or out.shape[-1] != x.shape[-1]:
        return "the linear layer's output is not flattened to (tokens, classes) by views alone"
    if _hint(out.numel()) != _hint(x.numel()):
        return "the views between the linear layer and the loss change its size"
    return None


def fuse_loss_pass(
    gm: torch.fx.GraphModule, chunk_bytes: int | None = None
) -> tuple[list[FusedLoss], list[str]]:
    """Fuse every matching ``cross_entropy`` in ``gm`` (in place, recompiled); returns the fused
    losses and one reason per ``cross_entropy`` left alone."""
    graph = gm.graph
    fused: list[FusedLoss] = []
    skipped: list[str] = []
    for ce in list(graph.nodes):
        if ce.op != "call_function" or ce.target is not F.cross_entropy:
            continue
        args = _ce_args(ce)
        chain, head = _chain(args.get("input"))
        lin, extra = _split_bias(head)
        why = _why_not(ce, args, chain, head, lin)
        if why is not None:
            skipped.append(f"cross_entropy {ce.name!r} not fused: {why}")
            continue
        fused.append(_replace(graph, ce, args, chain, head, (lin, extra), chunk_bytes))
    if fused:
        graph.lint()
        gm.recompile()
    return fused, skipped


def _replace(graph, ce, args, chain, head, linear, chunk_bytes) -> FusedLoss:
    lin, extra = linear
    h, w = lin.args[0], lin.args[1]
    b = lin.args[2] if len(lin.args) > 2 else lin.kwargs.get("bias")
    wv, x = _value(w), _value(args["input"])
    vocab, hidden = (_hint(s) for s in wv.shape)
    tokens = _hint(x.shape[0])
    need = tuple(bool(getattr(_value(v), "requires_grad", False)) for v in (h, w, b))
    others = [u for u in head.users if u not in chain and u is not ce]
    # the model's logits are read whole: their float32 form is never stored (Inductor computes
    # it inside the reduction and the pointwise kernel that read it); computed from the
    # layer's input, chunks keep all but one chunk's logits away
    chunks = 1 if others else chunk_count(tokens, vocab, chunk_bytes)
    outputs = _detach_logits(graph, head, h, w, b) if others else None
    with graph.inserting_before(ce):
        flat = graph.call_method("reshape", (h, -1, wv.shape[1]))
        logits = graph.call_method("reshape", (head, -1, wv.shape[0])) if others else None
        add = None if extra is None or others else graph.call_method("reshape", (extra, -1))
        call = (flat, w, b, args["target"], logits, args.get("ignore_index", -100),
                args.get("reduction", "mean"), chunks, need, x.dtype, add)  # fmt: skip
        new = graph.call_function(LinearCrossEntropy.apply, call)
    new.meta.update({k: v for k, v in ce.meta.items() if k != "example_value"})
    new.meta["example_value"] = _value(ce)
    ce.replace_all_uses_with(new)
    graph.erase_node(ce)
    for node in dict.fromkeys((*chain, head, lin)):
        if not node.users:
            graph.erase_node(node)
    paths = _stack_paths(lin)
    return FusedLoss(
        module=paths[-1] if paths else lin.name,
        tokens=tokens,
        hidden=hidden,
        vocab=vocab,
        chunks=chunks,
        reduction=args.get("reduction", "mean"),
        logits_reused=bool(others),
        outputs=outputs,
        dtype=str(_value(lin).dtype).replace("torch.", ""),
    )


def _detach_logits(graph: torch.fx.Graph, lin, h, w, b) -> dict:
    """The graph returns ``lin`` (the logits) detached and ``h`` as one more output: their
    gradient is computed outside the graph, only when used (:class:`memopt.fused_loss.
    LogitsGrad`); in the graph it would be zeros through two vocabulary-sized matmuls."""
    out = graph.output_node()
    flat = list(out.args[0])
    with graph.inserting_before(out):
        det = graph.call_method("detach", (lin,))
    det.meta["example_value"] = _value(lin)
    at = [i for i, a in enumerate(flat) if a is lin]
    for i in at:
        flat[i] = det
    flat.append(h)
    out.args = (tuple(flat),)
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    return {
        "logits_out": at[0],
        "logits_also": at[1:],
        "h_out": len(flat) - 1,
        "weight_in": inputs.index(w),
        "bias_in": inputs.index(b) if isinstance(b, torch.fx.Node) else None,
    }
