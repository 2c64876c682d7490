"""Canonical op names and ORT-style cluster ids.

A cluster id lists the canonical names of a recompute subgraph's ops in topological order, each
followed by ``+`` (``BiasGelu+``, ``Reshape+Where+``). The rules, in order:

1. Nodes that came from one original op (same ``original_aten`` and ``seq_nr``: a decomposed
   GELU is five nodes) form one op. Nodes inside an activation or norm module (a class whose
   name ends in GELU/GELUActivation/SiLU/RMSNorm/LayerNorm ...) form one op named after it, so
   Python-level activations such as Hugging Face's ``NewGELUActivation`` read ``Gelu``.
2. Each op is named through :data:`ALIASES` (aten op -> CamelCase), falling back to the
   CamelCase of the aten name (``aten.index_select`` -> ``IndexSelect``).
3. ``BiasGelu``: a ``Gelu`` whose input (through views) is a biased projection (``addmm``) or
   an ``Add`` of a 1-D bias; such an ``Add`` in the subgraph is absorbed into the name.
4. Leading and trailing view ops (``Reshape``, ``Transpose``, ``Expand`` ...) are dropped from
   the id when other ops remain: they cost no memory and only say how a tensor was viewed.

A saved tensor that no cluster can recompute gets a *saved id* (:func:`saved_ids`):
``Saved_<Op>_<module path>_<k>+`` (``Saved_Convolution_resnet_embedder_0+``), from the op that
made it, the module it was made in and its forward-order occurrence among saved tensors of
that op and module. None of these depends on FX node numbering, so the same model gives the
same ids run after run; an id over :data:`MAX_SAVED_ID` characters keeps the op, the module
path's tail and a hash of the full id (:func:`shorten_saved_id`).
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Sequence

import torch
import torch.fx

from memopt import meta_keys as mk
from memopt.facts import is_view
from memopt.passes.detect_layers import normalize_module_path

aten = torch.ops.aten
prims = torch.ops.prims

#: aten overload packet name -> canonical op name.
ALIASES: dict[str, str] = {
    "mm": "MatMul",
    "bmm": "MatMul",
    "matmul": "MatMul",
    "addmm": "Gemm",
    "baddbmm": "Gemm",
    "linear": "Gemm",
    "gelu": "Gelu",
    "silu": "Silu",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "add": "Add",
    "sub": "Sub",
    "rsub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "pow": "Pow",
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "rsqrt": "Rsqrt",
    "erf": "Erf",
    "_to_copy": "Cast",
    "convert_element_type": "Cast",
    "to": "Cast",
    "view": "Reshape",
    "_unsafe_view": "Reshape",
    "reshape": "Reshape",
    "view_as": "Reshape",
    "permute": "Transpose",
    "transpose": "Transpose",
    "t": "Transpose",
    "expand": "Expand",
    "unsqueeze": "Unsqueeze",
    "squeeze": "Squeeze",
    "slice": "Slice",
    "select": "Gather",
    "gather": "Gather",
    "index": "Gather",
    "index_select": "Gather",
    "embedding": "Gather",
    "where": "Where",
    "_softmax": "Softmax",
    "softmax": "Softmax",
    "_log_softmax": "LogSoftmax",
    "native_layer_norm": "LayerNorm",
    "layer_norm": "LayerNorm",
    "rms_norm": "RMSNorm",
    "_fused_rms_norm": "RMSNorm",
    "native_dropout": "Dropout",
    "dropout": "Dropout",
    "mean": "ReduceMean",
    "sum": "ReduceSum",
    "amax": "ReduceMax",
    "var_mean": "ReduceMean",
    "cat": "Concat",
    "split": "Split",
    "clone": "Identity",
    "alias": "Identity",
    "full": "Constant",
    "scalar_tensor": "Constant",
    "arange": "Range",
    "iota": "Range",
    "copy": "Identity",
}

#: Module class-name suffix -> canonical op name (rule 1).
MODULE_ALIASES: tuple[tuple[str, str], ...] = (
    ("GELUActivation", "Gelu"),
    ("GELU", "Gelu"),
    ("SiLU", "Silu"),
    ("SiLUActivation", "Silu"),
    ("RMSNorm", "RMSNorm"),
    ("LayerNorm", "LayerNorm"),
    ("Softmax", "Softmax"),
)

VIEW_NAMES = frozenset({"Reshape", "Transpose", "Expand", "Unsqueeze", "Squeeze", "Identity"})


def _packet_name(target) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"_+", name) if p) or "Op"


def op_name(target) -> str:
    """Canonical name of an aten op (alias table, else CamelCase of its name)."""
    base = _packet_name(target)
    if "attention" in base and "backward" not in base:  # every fused SDPA kernel
        return "Attention"
    return ALIASES.get(base, camel(base))


def module_alias(node: torch.fx.Node) -> tuple[str, str] | None:
    """(module path, canonical name) if the node runs inside an activation/norm module."""
    stack = node.meta.get(mk.TORCH_MODULE_STACK) or node.meta.get(mk.TORCH_FWD_MODULE_STACK)
    if not stack:
        return None
    path, cls = list(stack.values())[-1]
    cls_name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    cls_name = cls_name.rsplit(".", 1)[-1].strip("'>")
    for suffix, canon in MODULE_ALIASES:
        if cls_name.endswith(suffix):
            return str(path), canon
    return None


def _op_key(node: torch.fx.Node) -> tuple:
    mod = module_alias(node)
    if mod is not None:
        return ("module", mod[0], mod[1])
    orig = node.meta.get(mk.TORCH_ORIGINAL_ATEN)
    if orig is not None and orig is not node.target:
        return ("aten", orig, node.meta.get(mk.TORCH_SEQ_NR))
    return ("node", node.name, node.target)


def _key_name(key: tuple) -> str:
    if key[0] == "module":
        return key[2]
    return op_name(key[1] if key[0] == "aten" else key[2])


def _through_views(node: torch.fx.Node) -> torch.fx.Node:
    seen = 0
    while isinstance(node, torch.fx.Node) and is_view(node) and node.args and seen < 32:
        node = node.args[0]
        seen += 1
    return node


def _is_bias_add(node: torch.fx.Node) -> bool:
    if node.target is not aten.add.Tensor or len(node.args) < 2:
        return False
    for a in node.args[:2]:
        v = a.meta.get(mk.TORCH_VAL) if isinstance(a, torch.fx.Node) else None
        if isinstance(v, torch.Tensor) and v.dim() == 1:
            return True
    return False


def cluster_id(nodes: Sequence[torch.fx.Node]) -> str:
    """ORT-style id of a subgraph given its nodes in topological order."""
    groups: list[tuple[tuple, list[torch.fx.Node]]] = []
    index: dict[tuple, int] = {}
    for n in nodes:
        k = _op_key(n)
        if k in index:
            groups[index[k]][1].append(n)
        else:
            index[k] = len(groups)
            groups.append((k, [n]))
    members = set(nodes)
    names = [_key_name(k) for k, _ in groups]
    # Rule 3: BiasGelu.
    for i, (_k, gnodes) in enumerate(groups):
        if names[i] != "Gelu":
            continue
        first = gnodes[0]
        srcs = [a for a in first.all_input_nodes]
        for s in srcs:
            p = _through_views(s)
            if not isinstance(p, torch.fx.Node):
                continue
            if p.target is aten.addmm.default or _is_bias_add(p):
                names[i] = "BiasGelu"
                if p in members and _is_bias_add(p):
                    j = next(j for j, (_, g) in enumerate(groups) if p in g)
                    names[j] = ""
                break
    # Pieces of one decomposed op that the graph interleaves with others read once.
    merged: list[str] = []
    for (k, _g), name in zip(groups, names):
        if not name:
            continue
        if merged and merged[-1] == name and k[0] == "aten" and name not in VIEW_NAMES:
            continue
        merged.append(name)
    names = merged
    # Rule 4: strip leading/trailing views.
    if any(n not in VIEW_NAMES for n in names):
        while names and names[0] in VIEW_NAMES:
            names.pop(0)
        while names and names[-1] in VIEW_NAMES:
            names.pop()
    return "".join(f"{n}+" for n in names)


# --- saved ids ------------------------------------------------------------------------------

SAVED_PREFIX = "Saved_"
#: Saved ids longer than this are shortened (:func:`shorten_saved_id`).
MAX_SAVED_ID = 64
#: Op names are cut to this many characters in a shortened saved id.
MAX_OP_CHARS = 24
_NON_WORD = re.compile(r"[^A-Za-z0-9]+")


def _module_path(node: torch.fx.Node) -> str:
    """The innermost module a node ran in (``model.layers.3.mlp``), '' outside modules."""
    stack = node.meta.get(mk.TORCH_MODULE_STACK) or node.meta.get(mk.TORCH_FWD_MODULE_STACK)
    if not stack:
        return ""
    value = list(stack.values())[-1]
    path = value[0] if isinstance(value, tuple | list) else value
    return normalize_module_path(path) if isinstance(path, str) else ""


def saved_op_name(node: torch.fx.Node) -> str:
    """The canonical name of the op that made a saved tensor (through ``getitem``)."""
    src = node
    while src.target is operator.getitem and isinstance(src.args[0], torch.fx.Node):
        src = src.args[0]
    mod = module_alias(src)
    if mod is not None:
        return mod[1]
    orig = src.meta.get(mk.TORCH_ORIGINAL_ATEN)
    return op_name(orig if orig is not None else src.target)


def shorten_saved_id(op: str, path: Sequence[str], k: int, limit: int = MAX_SAVED_ID) -> str:
    """``Saved_<op>_<path>_<k>+``, shortened when over ``limit`` characters: the op name cut
    to :data:`MAX_OP_CHARS`, the module path's leading components dropped (its tail says
    where: ``layers_3_self_attn``), and ``_h<hash>`` appended, 8 hex digits of the SHA-1 of
    the full id, so the short id is deterministic and still unique."""
    full = "_".join([SAVED_PREFIX + op, *path, str(k)]) + "+"
    if len(full) <= limit:
        return full
    tag = "_h" + hashlib.sha1(full.encode()).hexdigest()[:8]
    tail = list(path)
    short = ""
    for drop in range(len(tail) + 1):
        short = "_".join([SAVED_PREFIX + op[:MAX_OP_CHARS], *tail[drop:], str(k)]) + tag + "+"
        if len(short) <= limit:
            break
    return short


def saved_ids(nodes: Sequence[torch.fx.Node]) -> list[str]:
    """Stable plan ids for saved tensors given in forward order (see the module docstring)."""
    counts: dict[tuple[str, ...], int] = {}
    out = []
    for n in nodes:
        op = _NON_WORD.sub("", saved_op_name(n)) or "Tensor"
        path = tuple(p for p in _NON_WORD.split(_module_path(n)) if p)
        k = counts.get((op, *path), 0)
        counts[(op, *path)] = k + 1
        out.append(shorten_saved_id(op, path, k))
    return out
