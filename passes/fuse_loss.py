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

from memopt._torch_compat.sizes import known_equal
from memopt.fused_loss import chunk_count, linear_cross_entropy, part_count
from memopt.passes.detect_layers import _stack_paths
from memopt.symbolic import fmt_bytes

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
    scale: float = 1.0  # the logits are the layer's output (plus a constant bias) times this
    added_bias: bool = False  # a constant bias added after the layer (final_logits_bias)
    cap: tuple[float, float] | None = None  # the logits are a * tanh(b * y) (Gemma 2's soft-cap)

    def text(self) -> str:
        how = (f"reads the logits the model returns, their gradient in {self.chunks} vocabulary "
               "part(s)," if self.logits_reused
               else f"computes the logits in {self.chunks} chunk(s) of tokens")  # fmt: skip
        after = " + a constant bias" if self.added_bias else ""
        after += f" times {self.scale:g}" if self.scale != 1.0 else ""
        after += f", soft-capped ({self.cap[0]:g} * tanh({self.cap[1]:g} * x))" if self.cap else ""
        logits = self.tokens * self.vocab * getattr(torch, self.dtype).itemsize
        return (
            f"Fused loss: {self.module} ({self.hidden:,} -> {self.vocab:,}, {self.dtype}){after} and its "
            f"cross-entropy ({self.reduction}) over {self.tokens:,} tokens: the forward {how}"
            " and computes the layer's gradients; the backward "
            f"keeps those ({self.tokens:,} x {self.hidden:,} and {self.vocab:,} x "
            f"{self.hidden:,}) or, where smaller, the logits' gradient in the layer's dtype, "
            f"never the logits ({self.tokens:,} x {self.vocab:,}, {fmt_bytes(logits)}) or their "
            "float32 softmax."
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
    while _castview(x) and len(x.users) == 1:  # one with other users holds the logits: the head
        chain.append(x)
        x = x.args[0]
    return chain, x


def _castview(x: Any) -> bool:
    """A cast to float32, ``contiguous`` or a view: the logits' values unchanged."""
    if not (isinstance(x, torch.fx.Node) and x.op == "call_method" and x.target in _CHAIN_METHODS):
        return False
    return x.target != "to" or all(a == torch.float32 for a in (*x.args[1:], *x.kwargs.values()))


def _scale_of(node: torch.fx.Node) -> tuple[Any, float] | None:
    """``(x, s)`` where ``node`` is ``x * s`` or ``x / (1 / s)`` by a Python number (Cohere's
    ``logit_scale``, Granite's ``logits_scaling``), else None."""
    if len(node.args) != 2 or node.kwargs or node.op not in ("call_function", "call_method"):
        return None
    name = getattr(node.target, "__name__", node.target)
    a, b = node.args
    if name in ("mul", "truediv", "div") and isinstance(b, int | float) and b:
        return a, (b if name == "mul" else 1.0 / b)
    if name == "mul" and isinstance(a, int | float):
        return b, a
    return None


def _head_parts(head: Any) -> tuple[Any, Any, float, list, tuple[float, float] | None]:
    """``head`` (the node holding the logits) as (its linear layer's node, a constant bias
    added to the layer's output or None, a number the sum is scaled by, the nodes in between,
    a soft-cap ``(a, b)`` or None). The logits are ``a * tanh(b * y)`` with a soft-cap (Gemma
    2's ``tanh(logits / cap) * cap``), else ``y``, where ``y = (linear(h, W) + bias) * scale``
    with casts and views between: BART's, mBART's, Pegasus' and Marian's bias, Cohere's and
    Granite's scale. Where no linear layer is reached, the first node of the walk that is none
    of these stands for it."""
    node, extra, scale, inner, cap = head, None, 1.0, [], None
    while isinstance(node, torch.fx.Node) and node.target not in _LINEAR:
        nxt: Any = None
        passed = [node] if node is not head else []
        if _castview(node):
            nxt = node.args[0]
        elif cap is None and extra is None and _is_tanh(node):
            # the scale met so far multiplies the tanh; a scale inside it divides its input
            inside = node.args[0]
            got = _scale_of(inside) if isinstance(inside, torch.fx.Node) else None
            if got is not None and len(inside.users) == 1:
                nxt, b = got
                passed.append(inside)
            else:
                nxt, b = inside, 1.0
            cap, scale = (scale, b), 1.0
        elif (got := _scale_of(node)) is not None and scale == 1.0 and extra is None:
            nxt, scale = got
        elif extra is None and (got := _bias_of(node)) is not None:
            nxt, extra = got
        if nxt is None:
            return node, None, 1.0, [], None
        inner.extend(passed)
        node = nxt
    return node, extra, scale, inner, cap


def _is_tanh(node: torch.fx.Node) -> bool:
    if len(node.args) != 1 or node.kwargs:
        return False
    return node.target in (torch.tanh, F.tanh) or (
        node.op == "call_method" and node.target == "tanh"
    )


def _bias_of(node: torch.fx.Node) -> tuple[Any, Any] | None:
    """``(x, bias)`` where ``node`` is ``x + bias`` with a constant bias (no gradient, one row
    of ``x``'s last dimension), else None."""
    if len(node.args) != 2 or node.kwargs:
        return None
    if not (node.target in _ADD or (node.op == "call_method" and node.target == "add")):
        return None
    for a, b in (node.args, node.args[::-1]):
        x, extra = _value(a), _value(b)
        if isinstance(extra, torch.Tensor) and not extra.requires_grad and x is not None:
            if known_equal(extra.numel(), extra.shape[-1]) and known_equal(
                extra.shape[-1], x.shape[-1]
            ):
                return a, b
    return None


def _why_not(ce: torch.fx.Node, args: dict, chain: list, head: Any, parts: tuple) -> str | None:
    """Why ``ce`` cannot be fused, or None (``head``: the node holding the logits; ``parts``:
    :func:`_head_parts` of it)."""
    lin, extra, _, inner, cap = parts
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
    if cap is not None and extra is not None:
        return "it soft-caps the logits of a layer with a constant bias added after it"
    if any(len(c.users) != 1 for c in ((*inner, lin) if lin is not head else ())):
        return "the ops between the linear layer and the logits have other users"
    others = [u for u in head.users if u not in chain and u is not ce]
    if any(u.op != "output" for u in others):
        return f"the linear layer's output {head.name!r} has other users in the graph"
    params = [lin.args[1], *lin.args[2:3], lin.kwargs.get("bias")]
    if others and not isinstance(ce.graph.output_node().args[0], tuple | list):
        return "the graph returns its logits alone"
    if others and any(isinstance(p, torch.fx.Node) and p.op != "placeholder" for p in params):
        return "the graph returns the logits and the layer's weight is not a graph input"
    w, out = _value(lin.args[1]), _value(lin)
    if w is None or out is None or w.dim() != 2 or not known_equal(out.shape[-1], x.shape[-1]):
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
        parts = _head_parts(head)
        why = _why_not(ce, args, chain, head, parts)
        if why is not None:
            skipped.append(f"cross_entropy {ce.name!r} not fused: {why}")
            continue
        fused.append(_replace(graph, ce, args, chain, head, parts, chunk_bytes))
    if fused:
        graph.lint()
        gm.recompile()
    return fused, skipped


def _replace(graph, ce, args, chain, head, parts, chunk_bytes) -> FusedLoss:
    lin, extra, scale, inner, cap = parts
    h, w = lin.args[0], lin.args[1]
    b = lin.args[2] if len(lin.args) > 2 else lin.kwargs.get("bias")
    wv, x = _value(w), _value(args["input"])
    vocab, hidden = (_hint(s) for s in wv.shape)
    tokens = _hint(x.shape[0])
    need = tuple(bool(getattr(_value(v), "requires_grad", False)) for v in (h, w, b))
    others = [u for u in head.users if u not in chain and u is not ce]
    # the model's logits are read whole: their float32 form is never stored (Inductor computes
    # it inside the reduction and the pointwise kernel that read it) and their gradient is
    # made a vocabulary part at a time; computed from the layer's input, chunks of tokens keep
    # all but one chunk's logits away
    if others:
        chunks = part_count(tokens, vocab, _value(lin).dtype.itemsize)
    else:
        chunks = chunk_count(tokens, vocab, chunk_bytes)
    outputs = _detach_logits(graph, head, h, w, b, scale, cap) if others else None
    with graph.inserting_before(ce):
        flat = graph.call_method("reshape", (h, -1, wv.shape[1]))
        logits = graph.call_method("reshape", (head, -1, wv.shape[0])) if others else None
        add = None if extra is None or others else graph.call_method("reshape", (extra, -1))
        call = (flat, w, b, args["target"], logits, args.get("ignore_index", -100),
                args.get("reduction", "mean"), chunks, need, x.dtype, add, scale, cap)  # fmt: skip
        new = graph.call_function(linear_cross_entropy, call)
    new.meta.update({k: v for k, v in ce.meta.items() if k != "example_value"})
    new.meta["example_value"] = _value(ce)
    ce.replace_all_uses_with(new)
    graph.erase_node(ce)
    for node in dict.fromkeys((*chain, head, *inner, lin)):
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
        scale=scale,
        added_bias=extra is not None,
        cap=cap,
        dtype=str(_value(lin).dtype).replace("torch.", ""),
    )


def _detach_logits(graph: torch.fx.Graph, lin, h, w, b, scale: float, cap) -> dict:
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
        "scale": scale,
        "cap": cap,
    }
