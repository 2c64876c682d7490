"""Graph facts: the one place that says what a node of an FX graph is.

Every pass, the planner's problem builder, the offload rewrite and the CLI read these answers
instead of keeping their own tables:

==========================  ===========================================================
fact                        function
==========================  ===========================================================
op class                    :func:`op_class` (view, matmul, attention, convolution,
                            random, collective, cast, norm, softmax, gather, constant,
                            pointwise, other); :func:`is_reduction` (a kernel that
                            reduces over dims: sum, var_mean, a whole norm)
aliasing                    :func:`is_view`, :func:`aliased_input`, :func:`storage_root`,
                            :func:`alias_users`
matmul operands             :data:`MATMUL_OPERANDS`, :func:`is_matmul`
size in bytes               :func:`nbytes_expr` (symbolic), :func:`nbytes` (at the
                            compile's sizes, or ``None``: unknown, never 0)
saved bytes                 :func:`saved_activation_bytes` (what a forward graph keeps
                            for backward), :func:`layout_copied_inputs` (graph inputs
                            Inductor saves as channels-last copies)
layer                       ``node.meta[LAYER]`` written once per graph by
                            ``passes/detect_layers.py``; :func:`layer_starts` (where each
                            layer begins), :func:`saved_layer` (the layer a saved tensor
                            is offloaded with)
==========================  ===========================================================

Aliasing follows views (by op name) and ops whose schema returns an alias of an input
(``Tensor(a)``: ``detach``, in-place ops, memopt's ``wait``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk

#: Ops that return a view of their first input (no new memory).
VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "permute",
        "transpose",
        "t",
        "expand",
        "squeeze",
        "unsqueeze",
        "slice",
        "select",
        "alias",
        "as_strided",
        "unfold",
        "diagonal",
        "view_as",
        "split",
        "split_with_sizes",  # torch.split with a list of sizes (DeepSeek-V3's MLA)
        "tensor_split",
        "unsafe_split",
        "unsafe_split_with_sizes",
        "unbind",
        "chunk",
        "narrow",
        "_reshape_alias",
        "view_as_real",
        "view_as_complex",
    }
)

#: Matmul ops and the argument indices of their two operands.
MATMUL_OPERANDS = {
    "mm": (0, 1),
    "addmm": (1, 2),
    "bmm": (0, 1),
    "baddbmm": (1, 2),
    "matmul": (0, 1),
    "_scaled_mm": (0, 1),
}
_CAST = frozenset({"convert_element_type", "_to_copy"})
_GATHER = frozenset(
    {"gather", "index", "index_select", "embedding", "where", "masked_fill", "cat", "stack"}
    | {"constant_pad_nd"}
)
_CONSTANT = frozenset({"full", "scalar_tensor", "arange", "iota", "zeros", "ones", "empty"})
_NORM = frozenset(
    {"native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm", "native_group_norm"}
    | {"group_norm", "native_batch_norm", "_native_batch_norm_legit_functional"}
)
_SOFTMAX = frozenset({"_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax"})
#: Norms and softmaxes, forward and backward, that reduce rows inside one kernel when they
#: reach a graph whole (Inductor's decompositions leave tagged reductions in their place).
_WHOLE_REDUCTIONS = (
    _NORM
    | _SOFTMAX
    | {"native_layer_norm_backward", "native_group_norm_backward", "_fused_rms_norm_backward"}
    | {"native_batch_norm_backward", "batch_norm_backward", "_native_batch_norm_legit"}
    | {"_native_batch_norm_legit_no_training", "_batch_norm_with_update", "_batch_norm_no_update"}
    | {"_batch_norm_with_update_functional", "_softmax_backward_data"}
    | {"_log_softmax_backward_data"}
)
_NORM_MODULE_SUFFIXES = ("RMSNorm", "LayerNorm", "Norm")
_COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional", "c10d"})


def packet(target: object) -> str:
    """The overload packet name of an op (``aten.mm.default`` -> ``mm``)."""
    return getattr(target, "__name__", str(target)).split(".")[0]


def tensor_val(node: object) -> torch.Tensor | None:
    """The (fake) tensor a node produces, or None (SymInts, tuples, no metadata)."""
    if not isinstance(node, torch.fx.Node):
        return None
    v = node.meta.get(mk.TORCH_VAL)
    return v if isinstance(v, torch.Tensor) else None


# --- aliasing -------------------------------------------------------------------------------


def is_view(node: torch.fx.Node) -> bool:
    """Whether a node returns a view of its first input (an output of a multi-output view op,
    such as ``split`` + ``getitem``, included)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and is_view(src)
    return packet(node.target) in VIEW_OPS


def aliased_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """The input whose memory ``node``'s output aliases: views, and ops whose schema returns
    ``Tensor(a)``; None when the output owns new memory."""
    if node.op != "call_function" or not (is_view(node) or compat.op_returns_alias(node.target)):
        return None
    src = node.args[0] if node.args else None
    return src if isinstance(src, torch.fx.Node) else None


def storage_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node that owns the memory ``node`` aliases (itself when it owns new memory)."""
    for _ in range(256):
        src = aliased_input(node)
        if src is None:
            break
        node = src
    return node


def alias_users(node: torch.fx.Node) -> list[torch.fx.Node]:
    """Every user of ``node`` and, through views of the same storage, of its aliases."""
    out, stack, seen = [], list(node.users), set()
    root = storage_root(node)
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        out.append(u)
        if aliased_input(u) is not None and storage_root(u) is root:
            stack.extend(u.users)
    return out


# --- op classes -----------------------------------------------------------------------------


def is_matmul(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and packet(node.target) in MATMUL_OPERANDS


def is_reduction(node: torch.fx.Node) -> bool:
    """Whether the op reduces over dimensions of its input in one kernel: an op tagged
    ``reduction`` (sum, mean, amax, var_mean, ...: what a decomposed norm, softmax or loss
    leaves), or a norm or softmax (forward or backward) that reaches the graph whole. The
    pointwise ops of a decomposed norm or softmax are not, though :func:`op_class` calls them
    norm or softmax by their original op; an output of a multi-output op (``getitem``) is not
    either: the op is."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    if torch.Tag.reduction in getattr(node.target, "tags", ()):
        return True
    return packet(node.target) in _WHOLE_REDUCTIONS


def is_collective(node: torch.fx.Node) -> bool:
    return getattr(node.target, "namespace", None) in _COLLECTIVE_NAMESPACES


def _in_norm_module(node: torch.fx.Node) -> bool:
    stack = node.meta.get(mk.TORCH_MODULE_STACK)
    if not stack:
        return False
    _path, cls = list(stack.values())[-1]
    name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return name.rstrip("'>").endswith(_NORM_MODULE_SUFFIXES)


def op_class(node: torch.fx.Node) -> str:
    """One of: view, pointwise, cast, gather, constant, matmul, norm, softmax, attention,
    convolution, random, collective, other."""
    t = node.target
    if t is operator.getitem and node.args and isinstance(node.args[0], torch.fx.Node):
        return op_class(node.args[0])  # an output of a multi-output op is that op's class
    name = packet(t)
    if "attention" in name:  # SDPA kernels carry the random tag for their dropout argument
        return "attention"
    if is_collective(node):
        return "collective"
    if compat.is_random_op(t):
        return "random"
    if is_view(node):
        return "view"
    orig = node.meta.get(mk.TORCH_ORIGINAL_ATEN)
    orig_name = packet(orig) if orig is not None else name
    if name in _CAST:
        return "cast"
    if name in MATMUL_OPERANDS:
        return "matmul"
    if name.startswith("convolution"):
        return "convolution"
    if orig_name in _NORM:
        return "norm"
    if orig_name in _SOFTMAX:
        return "softmax"
    if name in _GATHER:
        return "gather"
    if name in _CONSTANT:
        return "constant"
    if torch.Tag.pointwise in getattr(t, "tags", ()):
        return "pointwise"
    if _in_norm_module(node) and name in ("mean", "sum", "var_mean", "var", "amax"):
        return "norm"
    return "other"


def attention_dropout(node: torch.fx.Node) -> bool:
    """Whether an attention node (``op_class == "attention"``) may drop out: its ``dropout_p``
    argument is not the constant 0. Recomputing such a kernel would draw new numbers; every
    SDPA kernel names the argument ``dropout_p`` in its schema."""
    if node.target is operator.getitem and node.args and isinstance(node.args[0], torch.fx.Node):
        return attention_dropout(node.args[0])
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return True
    for i, arg in enumerate(schema.arguments):
        if arg.name == "dropout_p":
            if arg.name in node.kwargs:
                p = node.kwargs[arg.name]
            elif i < len(node.args) and not arg.kwarg_only:
                p = node.args[i]
            else:
                p = arg.default_value
            return not (isinstance(p, int | float) and not isinstance(p, bool) and p == 0)
    return False


def is_widening_cast(node: torch.fx.Node) -> bool:
    """A cast to a wider dtype (its smaller input can be saved instead of its output)."""
    if op_class(node) != "cast" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    out, inp = tensor_val(node), tensor_val(node.args[0])
    return out is not None and inp is not None and out.element_size() > inp.element_size()


# --- sizes ----------------------------------------------------------------------------------


def nbytes_expr(val: object) -> sympy.Expr:
    """Symbolic bytes of a tensor (or the sum over a tuple of tensors); 0 for non-tensors."""
    if isinstance(val, torch.Tensor):
        return compat.sym_expr(val.numel()) * val.element_size()
    if isinstance(val, tuple | list):
        return sum((nbytes_expr(v) for v in val), sympy.Integer(0))
    return sympy.Integer(0)


def storage_nbytes_expr(val: torch.Tensor) -> sympy.Expr:
    """Symbolic bytes of a graph input's whole storage: an expanded mask (stride 0) holds
    far fewer bytes than its elements, a slice's base more (what one storage costs)."""
    try:
        return compat.sym_expr(val.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):  # a tensor without a storage
        return nbytes_expr(val)


def nbytes(val: object, value: Callable[[sympy.Expr], int | None]) -> int | None:
    """Bytes at the compile's sizes (``value`` evaluates an expression), or None when a size
    cannot be evaluated (data-dependent shapes): unknown, never 0."""
    expr = nbytes_expr(val)
    if isinstance(expr, sympy.Integer):
        return int(expr)
    v = value(expr)
    return None if v is None else int(v)


def dim_value(x: object, value: Callable[[sympy.Expr], int | None]) -> int | None:
    """An int dimension, or a SymInt's value at the compile's sizes (None: unknown)."""
    if isinstance(x, torch.SymInt):
        v = value(x.node.expr)
        return None if v is None else int(v)
    return int(x)  # type: ignore[arg-type]


# --- layers ---------------------------------------------------------------------------------


def layer_of(node: torch.fx.Node) -> int | None:
    """The node's layer (tagged by ``detect_layers_pass``), or None outside the layers."""
    return node.meta.get(mk.LAYER)


def _starts_layer(n: torch.fx.Node) -> bool:
    """A node that can mark where a layer's computation begins: computed work, not a view of
    a graph input (weight transposes can sit anywhere) and not an op memopt inserted."""
    if n.op != "call_function" or tensor_val(n) is None:
        return False
    if getattr(n.target, "namespace", None) == "memopt":
        return False
    inputs = n.all_input_nodes
    return not (inputs and all(a.op == "placeholder" for a in inputs) and is_view(n))


def layer_starts(nodes: Sequence[torch.fx.Node], *, forward: bool) -> dict[int, int]:
    """Index in ``nodes`` where each layer's region begins, in execution order (forward:
    0, 1, ...; backward: n-1, ..., 0): the first work node of the layer after the previous
    layer's start. A few ops of a layer can sit elsewhere (in the backward, ops tagged with
    the bottom layer run early); taking each layer's very first op would make the starts
    non-monotonic. The planner's offload windows and the offload rewrite's sync points both
    come from here."""
    tags = {layer_of(n) for n in nodes}
    order = sorted((t for t in tags if isinstance(t, int)), reverse=not forward)
    starts: dict[int, int] = {}
    floor = -1
    for lay in order:
        first = next(
            (
                i
                for i, n in enumerate(nodes)
                if i > floor and layer_of(n) == lay and _starts_layer(n)
            ),
            None,
        )
        if first is not None:
            starts[lay] = first
            floor = first
    return starts


def saved_layer(
    bw_node: torch.fx.Node, fw_node: torch.fx.Node, bw_pos: dict[torch.fx.Node, int]
) -> int | None:
    """The layer a saved tensor is offloaded with: the layer of its first backward user that
    has one (the backward that needs it first), else the layer of its forward producer."""
    for user in sorted(bw_node.users, key=bw_pos.__getitem__):
        if layer_of(user) is not None:
            return layer_of(user)
    return layer_of(fw_node)


def first_user(nodes: Iterable[torch.fx.Node], pos: dict[torch.fx.Node, int]):
    """The earliest user (by ``pos``) of any of ``nodes``, or None."""
    users = [u for n in nodes for u in n.users if u in pos]
    return min(users, key=pos.__getitem__, default=None)


# --- what a forward graph saves -------------------------------------------------------------

_CONV = "convolution"


def saved_outputs(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> list[torch.fx.Node]:
    """The tensors a partitioned forward graph returns for backward (SymInts left out)."""
    outs = fw.graph.output_node().args[0][num_fwd_outputs:]
    return [n for n in outs if isinstance(n, torch.fx.Node) and tensor_val(n) is not None]


def inductor_layout_opt(fw: torch.fx.GraphModule) -> bool:
    """Whether Inductor lowers ``fw`` with its channels-last layout optimization (graphs with
    convolutions: always on CPU with oneDNN, by a heuristic on CUDA)."""
    if not any(n.op == "call_function" and packet(n.target) == _CONV for n in fw.graph.nodes):
        return False
    from memopt import _torch_compat as compat

    return compat.inductor_layout_opt(fw)


def _channels_last_copy(val: torch.Tensor) -> bool:
    """A 4-D tensor that is not already laid out channels-last (a size-1 dim makes the two
    layouts coincide): Inductor copies it for a channels-last convolution."""
    if val.dim() != 4:
        return False
    try:
        return not bool(val.is_contiguous(memory_format=torch.channels_last))
    except Exception:  # a data-dependent size: the layout cannot be decided, assume a copy
        return True


@dataclass(frozen=True)
class LayoutCopies:
    """The graph inputs Inductor's layout optimization saves as channels-last copies because a
    convolution reads them, directly or through other ops (an image padded before the stem
    convolution), by Inductor's own rule (``compat.inductor_channels_last_nodes``): ``saved``,
    those the forward saves (new memory held until backward; on CPU the image and every 4-D
    conv weight), and ``if_saved``, those it does not, by name with the copy's bytes, which a
    recompute reading one would keep in place of what it frees."""

    saved: tuple[torch.fx.Node, ...] = ()
    if_saved: Mapping[str, sympy.Expr] = field(default_factory=dict)
    channels_last: bool = False
    """Inductor lowers the graph with its layout optimization (:func:`inductor_layout_opt`)."""


def layout_copies(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> LayoutCopies:
    """:class:`LayoutCopies` of a forward graph (its layout decided once)."""
    saved = set(saved_outputs(fw, num_fwd_outputs))
    # a graph input, or a view of one (CogVideoX reshapes its 5-D latents to 4-D frames for
    # the patch convolution: the copy is of the view)
    inputs = [
        n
        for n in fw.graph.nodes
        if (n.op == "placeholder" or storage_root(n).op == "placeholder")
        and isinstance(v := tensor_val(n), torch.Tensor)
        and _channels_last_copy(v)
    ]
    opt = inductor_layout_opt(fw)
    if not inputs or not opt:
        return LayoutCopies(channels_last=opt)
    prefer = compat.inductor_channels_last_nodes(fw)
    copied = [n for n in inputs if n in prefer]
    return LayoutCopies(
        saved=tuple(n for n in copied if n in saved),
        if_saved={n.name: nbytes_expr(tensor_val(n)) for n in copied if n not in saved},
        channels_last=True,
    )


def layout_copied_inputs(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> list[torch.fx.Node]:
    """The saved graph inputs Inductor keeps channels-last copies of (:class:`LayoutCopies`)."""
    return list(layout_copies(fw, num_fwd_outputs).saved)


def is_rng_state(node: torch.fx.Node) -> bool:
    """The RNG state the partitioner saves for a recomputed seeded op (the first output of
    ``run_and_save_rng_state``; backward names its placeholder ``rng_state_output_<i>``)."""
    src = node.args[0] if node.target is operator.getitem and node.args else None
    return isinstance(src, torch.fx.Node) and packet(src.target) == "run_and_save_rng_state"


def rng_state_bytes(node: torch.fx.Node) -> int:
    """A generator state's bytes (its fake tensor's size is a fresh symbol): the generator's,
    as on CUDA when planning for it (``compat.planning_for_cuda``: none)."""
    return compat.seeded_recompute_state_bytes(tensor_val(node).device)


def padded_nbytes(node: torch.fx.Node, padding: compat.StridePadding | None) -> sympy.Expr:
    """Bytes of ``node``'s storage as Inductor allocates it: with its strides padded where
    Inductor lays the buffer out itself (an op it lowers, not an extern kernel's output) on a
    graph it pads (:func:`compat.inductor_stride_padding`), else the tensor's own bytes. On
    CUDA an (8, 4, 18, 18) float softmax is 41,920 B, its batch stride 1,296 rounded to 1,312
    elements; symbolic sizes are not padded (Inductor's ``pad_dynamic_shapes`` is off)."""
    from memopt.memory_rules import fusible

    val = tensor_val(node)
    plain = nbytes_expr(val)
    if padding is None or node in padding.disliked or not fusible(node) or is_view(node):
        return plain
    sizes, strides = list(val.shape), list(val.stride())
    if not all(isinstance(x, int) for x in (*sizes, *strides)) or 0 in sizes or len(sizes) < 2:
        return plain
    align = padding.align_bytes // val.dtype.itemsize
    if align <= 1 or (val.dim() == 4 and val.is_contiguous(memory_format=torch.channels_last)):
        return plain  # Inductor leaves channels-last layouts unpadded (pad_channels_last)
    order = sorted(range(len(sizes)), key=lambda i: strides[i])  # fill order, as Inductor's
    new = [0] * len(sizes)
    new[order[0]], padded = 1, False
    for prev, i in zip(order, order[1:]):
        new[i] = new[prev] * sizes[prev]
        if new[i] > padding.threshold and new[i] % align:
            new[i], padded = -(-new[i] // align) * align, True
    if not padded:
        return plain
    elems = 1 + sum((n - 1) * st for n, st in zip(sizes, new))
    return sympy.Integer(elems * val.dtype.itemsize)


def saved_activation_bytes(
    fw: torch.fx.GraphModule, num_fwd_outputs: int, copied: Iterable[torch.fx.Node] | None = None
) -> sympy.Expr:
    """Symbolic bytes of the activations a forward graph keeps for backward: the storages of
    its saved outputs (a view and its base count once), graph inputs left out (parameters
    and user inputs are not activations) except the channels-last copies Inductor saves in
    their place (``copied``, when known: :func:`layout_copied_inputs`)."""
    roots: dict[torch.fx.Node, sympy.Expr] = {}
    padding = compat.inductor_stride_padding(fw, num_fwd_outputs)
    for n in saved_outputs(fw, num_fwd_outputs):
        if n.op == "placeholder":
            continue
        r = storage_root(n)
        if r.op != "placeholder" and tensor_val(r) is not None:
            roots[r] = (
                sympy.Integer(rng_state_bytes(r)) if is_rng_state(r) else padded_nbytes(r, padding)
            )
    if copied is None:
        copied = layout_copied_inputs(fw, num_fwd_outputs)
    copies = [nbytes_expr(tensor_val(n)) for n in copied]
    return sum([*roots.values(), *copies], sympy.Integer(0))
