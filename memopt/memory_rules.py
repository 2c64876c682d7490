"""Which tensors of a partitioned graph occupy memory, and until when: the rules shared by
``memopt plan``'s liveness model (:mod:`memopt.cli.liveness`) and the budget planner's sweep
(:mod:`memopt.passes.build_planning_problem`). On the 8-layer Llama of benchmarks/pareto.py
(H100) they predict 6.55 GiB for the unoptimized step against 6.63-6.65 GiB measured.

Views and ops that return an alias of an input allocate nothing (their bytes belong to the
tensor they alias). A temporary that Inductor fuses away takes no memory: a tensor must exist
in memory only when the op that makes it, or one that reads it, is an extern kernel (matmul,
attention, convolution, an unknown op), or when two padded matmul operands copy it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk
from memopt._torch_compat.sizes import known_equal
from memopt.facts import (
    MATMUL_OPERANDS,
    alias_users,
    aliased_input,
    is_view,
    packet,
    storage_root,
    tensor_val,
)

aten = torch.ops.aten

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


def addmm_parts(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """``(mm, inp)`` when Inductor's post-grad pass makes ``node``, an ``add`` of a matmul and
    a tensor, one ``addmm`` (``fx_passes/post_grad.py: addmm``, ``is_valid_addmm_fusion``):
    the matmul's only user, ``inp`` expandable to its output, one dtype, and on a GPU not
    when every use of the sum is pointwise. The matmul then runs where the add does (its
    operands live to there: the tied LM head's gradient, added to the embedding's, keeps
    the logits' gradient to the end of backward) and its own output never exists."""
    if node.op != "call_function" or node.target is not aten.add.Tensor or node.kwargs:
        return None
    if len(node.args) != 2 or not all(isinstance(a, torch.fx.Node) for a in node.args):
        return None
    for mm, inp in (node.args, node.args[::-1]):  # Inductor's two patterns, in its order
        if mm.target is not aten.mm.default or len(mm.users) != 1 or len(mm.args) != 2:
            continue
        vi, va, vb = (tensor_val(x) for x in (inp, *mm.args))
        if not all(isinstance(v, torch.Tensor) for v in (vi, va, vb)):
            continue
        if not vi.dtype == va.dtype == vb.dtype:
            continue
        if not compat.expandable_to(vi.shape, (va.shape[0], vb.shape[1])):
            continue
        if compat.is_gpu(vi.device) and all(compat.is_pointwise_use(u) for u in node.users):
            continue  # should_prefer_unfused_addmm
        return mm, inp
    return None


def deferred_mm(node: torch.fx.Node) -> bool:
    """A matmul Inductor folds into its one user's ``addmm`` (:func:`addmm_parts`)."""
    if node.op != "call_function" or node.target is not aten.mm.default or len(node.users) != 1:
        return False
    parts = addmm_parts(next(iter(node.users)))
    return parts is not None and parts[0] is node


def fusible(node: torch.fx.Node) -> bool:
    """Whether Inductor lowers the op into its own kernels (so temporaries may fuse away)."""
    if node.op != "call_function":
        return False
    if node.target is aten.add.Tensor and addmm_parts(node) is not None:
        return False  # an extern addmm
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and fusible(src)
    if is_view(node):
        return True
    tags = getattr(node.target, "tags", ())
    if torch.Tag.pointwise in tags or torch.Tag.reduction in tags:
        return True
    return getattr(node.target, "__name__", "").split(".")[0] in _FUSIBLE_NAMES


#: functional scatters: Inductor lowers each to a copy of its ``self`` argument into the output
#: buffer, then an in-place scatter; a fusible ``self`` (the zeros of the embedding backward)
#: is computed into that buffer and has none of its own
_SCATTERS = frozenset(
    {"index_put", "_unsafe_index_put", "scatter", "scatter_add", "scatter_reduce", "index_add"}
)


def _scatter_self(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    """Whether ``user`` is a functional scatter that reads ``node`` only as its ``self``."""
    name = getattr(user.target, "__name__", "").split(".")[0]
    if name not in _SCATTERS or not user.args or user.args[0] is not node:
        return False
    rest: list[torch.fx.Node] = []  # every other argument, inside lists (index_put's indices)
    torch.fx.node.map_arg((user.args[1:], user.kwargs), rest.append)
    return node not in rest


def must_exist(node: torch.fx.Node, alias_users: list[torch.fx.Node]) -> bool:
    if deferred_mm(node):
        return False
    if not fusible(node):
        return True
    if any(
        u.op == "call_function" and not fusible(u) and not _scatter_self(node, u)
        for u in alias_users
    ):
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


class ReadPoints:
    """Where a graph's kernels read each value, with fusion taken into account.

    A temporary that Inductor fuses away is computed inside the kernel of each materialized
    value that consumes it, so the tensors it reads are read there, not at its own position:
    the LM head's saved logits are read by the one kernel that writes the logits gradient
    (the whole log-softmax backward fuses into it), and both are live at once with the
    incoming logits tangent. ``at(u)`` is the last position at which ``u``'s value is consumed:
    ``pos[u]`` for a value that exists in memory (extern kernels, their inputs, reductions,
    graph outputs), else the latest read point of its users.
    """

    def __init__(self, pos: dict[torch.fx.Node, int]):
        self.pos = pos
        self._memo: dict[torch.fx.Node, int] = {}

    def at(self, node: torch.fx.Node) -> int | None:
        if node not in self.pos:
            return None
        if node in self._memo:
            return self._memo[node]
        # iterative post-order over fused-away chains (graphs are deep)
        stack = [node]
        while stack:
            n = stack[-1]
            if n in self._memo:
                stack.pop()
                continue
            if materialized(n):
                self._memo[n] = self.pos[n]
                stack.pop()
                continue
            pending = [u for u in n.users if u in self.pos and u not in self._memo]
            if pending:
                stack.extend(pending)
                continue
            reads = [self._memo[u] for u in n.users if u in self._memo]
            self._memo[n] = max([self.pos[n], *reads])
            stack.pop()
        return self._memo[node]

    def last(self, users: list[torch.fx.Node], default: int) -> int:
        """The last read point among ``users`` (``default`` when none is in this graph)."""
        points = [p for p in (self.at(u) for u in users) if p is not None]
        return max([default, *points])

    def first(self, users: list[torch.fx.Node]) -> int | None:
        """Where a value read by ``users`` must first exist: the position of the first of them
        (views included; None when none is in this graph). Torch's partitioner places a
        recompute right before it, so a recomputed tensor is live from there. Not the first
        of their :meth:`at`: a fused-away user's read point is its *last* consuming kernel (the
        recomputed SiLU gate is read by two kernels; its first reader's ``at`` is the second)."""
        points = [self.pos[u] for u in users if u in self.pos]
        return min(points) if points else None


def materialized(n: torch.fx.Node) -> bool:
    """Whether ``n``'s value is written to memory by some kernel (placeholders, extern kernels
    and their inputs, reductions, graph outputs); otherwise Inductor fuses it into the kernels
    that consume it and it never exists."""
    if deferred_mm(n):
        return False  # computed by its user's addmm, read where that runs
    if n.op != "call_function" or not fusible(n):
        return True
    if torch.Tag.reduction in getattr(n.target, "tags", ()):
        return True
    if any(u.op == "output" for u in n.users):
        return True
    return aliased_input(n) is None and must_exist(n, alias_users(n))


#: the matmuls Inductor's ``pad_mm`` pads
_PADDED_MATMULS = frozenset({"mm", "addmm", "bmm"})
_ALIGN = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}
#: Inductor pads only compute-bound matmuls: arithmetic intensity ``MNK / (MK + KN + MN)`` above
#: half the device's FLOP/byte balance (H100 bf16: 990 TFLOP/s over 3.35 TB/s, halved).
_PAD_MIN_INTENSITY = {torch.float16: 148.0, torch.bfloat16: 148.0, torch.float32: 10.0}


def padded_operands(node: torch.fx.Node) -> list[tuple[torch.fx.Node, sympy.Rational]]:
    """The operands Inductor's ``pad_mm`` would copy for this matmul, each with its padded size
    as a multiple of its size. Only static (integer) sizes are padded, as Inductor does."""
    if node.op != "call_function":
        return []
    name = packet(node.target)
    if name not in _PADDED_MATMULS:
        return []
    i1, i2 = MATMUL_OPERANDS[name]
    if len(node.args) <= i2:
        return []
    a, b = node.args[i1], node.args[i2]
    if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)):
        return []
    va, vb = a.meta.get(mk.TORCH_VAL), b.meta.get(mk.TORCH_VAL)
    if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)):
        return []
    align = _ALIGN.get(va.dtype)
    if align is None or vb.dtype != va.dtype:
        return []
    m, k = va.shape[-2], va.shape[-1]
    n = vb.shape[-1]
    hints = [compat.int_hint(x) for x in (m, k, n)]
    if 0 in hints:
        return []
    hm, hk, hn = hints
    if hm * hk * hn / (hm * hk + hk * hn + hm * hn) <= _PAD_MIN_INTENSITY[va.dtype]:
        return []

    def up(x: object) -> int | None:  # padded size of a static unaligned dim
        if isinstance(x, int) and x % align:
            return (x + align - 1) // align * align
        return None

    pm, pk, pn = up(m), up(k), up(n)
    out = []
    grow_a = sympy.Rational(pm or hm, hm) * sympy.Rational(pk or hk, hk)
    grow_b = sympy.Rational(pk or hk, hk) * sympy.Rational(pn or hn, hn)
    if grow_a != 1:
        out.append((a, grow_a))
    if grow_b != 1:
        out.append((b, grow_b))
    return out


def _is_pad(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and packet(node.target) == "constant_pad_nd"
        and bool(node.args)
        and isinstance(node.args[0], torch.fx.Node)
    )


def _numel(node: torch.fx.Node) -> sympy.Expr | None:
    """Elements of a node's value, a sympy expression (symbolic sizes compare without guards)."""
    v = tensor_val(node)
    return None if v is None else compat.sym_expr(v.numel())


def start(node: torch.fx.Node, pos: dict[torch.fx.Node, int]) -> int:
    """Where a temporary begins. A padded copy (``constant_pad_nd``, what Inductor's ``pad_mm``
    inserts before a matmul) is its own kernel, run where it stands (next to its matmul), after
    the kernel that made its input has freed what only it read (BERT's tied MLM head on an
    H100: the saved logits are gone when the logits gradient's padded copy is allocated).
    Padded copies of one storage with as many elements are one kernel (Inductor fuses them
    horizontally: they read the same input), run where the first of them stands: the two
    padded copies of GPT-2's LM-head gradient (one for each matmul of its backward) coexist."""
    if not _is_pad(node):
        return pos[node]
    root, numel = storage_root(node.args[0]), _numel(node)
    group = [
        pos[u]
        for u in alias_users(root)
        if u in pos
        and _is_pad(u)
        and storage_root(u.args[0]) is root
        and numel is not None
        and _numel(u) == numel
    ]
    return min([pos[node], *group])


def padded_copies(
    ops: list[torch.fx.Node], pos: dict[torch.fx.Node, int]
) -> list[tuple[torch.fx.Node, sympy.Rational, int, int]]:
    """``(operand, size factor, start, end)`` of each padded matmul operand copy among ``ops``
    (a graph traced where Inductor does not pad: the copies ``pad_mm`` would make on CUDA),
    live from the kernel that makes the operand to its matmul. Not :func:`start`'s rule for
    the copies a CUDA graph holds: with it, ``memopt plan``'s GPT-2-medium on a machine without
    a GPU predicted 10.73 GiB where an H200 measured 11.56 (-7.2%; +6.1% with this start), while
    the same trace on the GPU host (pads in the graph, ``start``) predicted 11.59. Which copies
    ``pad_mm`` makes there was not traced; the over-estimate is kept meanwhile."""
    out = []
    for n in ops:
        for operand, factor in padded_operands(n):
            out.append((operand, factor, pos.get(storage_root(operand), pos[n]), pos[n]))
    return out


# --- Inductor's in-place reuse of a buffer by the kernel that reads it last ----------------

#: views that keep a dense tensor's linear index (a kernel reading through them reads the
#: element it writes)
_RESHAPES = frozenset({"view", "_unsafe_view", "reshape", "squeeze", "unsqueeze"})


def _dense(v: torch.Tensor) -> bool:
    return v.is_contiguous() and known_equal(v.storage_offset(), 0)


def _same_index(node: torch.fx.Node, numel: object) -> bool:
    """Whether ``node`` reads its inputs at the index it writes, for inputs of ``numel``
    elements: a pointwise op of that many elements, or a reshape of a dense tensor."""
    v = tensor_val(node)
    if v is None or not known_equal(v.numel(), numel):
        return False
    if packet(node.target) in _RESHAPES:
        return _dense(v)
    return torch.Tag.pointwise in getattr(node.target, "tags", ())


def kernel_readers(
    buffer: torch.fx.Node, pos: Mapping[torch.fx.Node, int]
) -> dict[torch.fx.Node, bool]:
    """The values whose kernels read ``buffer`` (its users, through views and through the
    temporaries Inductor fuses into them), each with whether every read is at the index the
    kernel writes (``SchedulerNode.can_inplace``: the same index and size)."""
    v = tensor_val(buffer)
    numel = v.numel() if v is not None else None
    out: dict[torch.fx.Node, bool] = {}
    stack = [(u, True) for u in buffer.users]
    seen: set[tuple[torch.fx.Node, bool]] = set()
    while stack:
        u, same = stack.pop()
        if (u, same) in seen or (u.op != "output" and u not in pos):
            continue
        seen.add((u, same))
        same = same and u.op != "output" and _same_index(u, numel)
        if u.op == "output" or (aliased_input(u) is None and materialized(u)):
            out[u] = out.get(u, True) and same
        else:  # a view or a fused-away temporary: read where its users' kernels run
            stack.extend((w, same) for w in u.users)
    return out


def _ancestors(node: torch.fx.Node, floor: int, pos: Mapping[torch.fx.Node, int]) -> set:
    """The nodes ``node`` depends on, down to position ``floor``."""
    out: set[torch.fx.Node] = set()
    stack = list(node.all_input_nodes)
    while stack:
        n = stack.pop()
        if n in out or pos.get(n, -1) < floor:
            continue
        out.add(n)
        stack.extend(n.all_input_nodes)
    return out


def in_place_reader(
    buffer: torch.fx.Node, pos: Mapping[torch.fx.Node, int], nbytes: Callable[[torch.fx.Node], int]
) -> torch.fx.Node | None:
    """The kernel that writes its output into ``buffer`` (``Scheduler.decide_inplace_update``),
    or None: the last kernel that reads it, when it is a kernel Inductor generates (an extern
    kernel's output is always new) of a dense output of ``buffer``'s device, dtype and storage
    size (``codegen/wrapper.py: can_match_buffer_size``), that reads ``buffer`` only at the
    index it writes (``can_inplace``, ``single_index_in_fused_node``), and when every other
    reader is one it depends on (the rest are remaining uses: a second reader fused into the
    same kernel, the SiLU backward's three outputs reading the gate and up projections, keeps
    the buffer). Whether the graph owns ``buffer`` (``PythonWrapperCodegen.can_reuse``: no
    graph output, no graph input but a donated saved tensor) is the caller's; ``nbytes`` sizes
    a node's value."""
    readers = kernel_readers(buffer, pos)
    if not readers or any(r.op == "output" for r in readers):
        return None
    last = max(readers, key=pos.__getitem__)
    out, buf = tensor_val(last), tensor_val(storage_root(buffer))
    if out is None or buf is None or not readers[last] or aliased_input(last) is not None:
        return None
    if not (fusible(last) and materialized(last)):
        return None
    if (out.device, out.dtype) != (buf.device, buf.dtype) or not (_dense(out) and _dense(buf)):
        return None
    if not nbytes(last) == nbytes(storage_root(buffer)) > 0:
        return None
    others = [r for r in readers if r is not last]
    if others:
        up = _ancestors(last, min(pos[r] for r in others), pos)
        # an earlier reader Inductor generates may fuse into this kernel: same index only
        if any(r not in up or (fusible(r) and not readers[r]) for r in others):
            return None
    return last


def donated_saved(
    fw: torch.fx.GraphModule, bw: torch.fx.GraphModule, num_user_outputs: int
) -> set[str]:
    """The storages of the saved tensors AOTAutograd donates to the backward
    (``torch._functorch.config.donated_buffer``, on by default;
    ``graph_compile.collect_fw_donated_buffer_idxs``): those whose storage is no forward
    input's, no user forward output's and no backward output's. Only these graph inputs may
    Inductor's backward reuse (``ir.DonatedBuffer``)."""
    if not compat.donated_buffers_on():
        return set()
    outs = list(fw.graph.output_node().args[0])
    taken = {storage_root(a).name for a in outs[:num_user_outputs] if isinstance(a, torch.fx.Node)}
    fw_by_name = {n.name: n for n in fw.graph.nodes}
    for a in bw.graph.output_node().args[0]:
        if isinstance(a, torch.fx.Node) and storage_root(a).name in fw_by_name:
            taken.add(storage_root(fw_by_name[storage_root(a).name]).name)
    bw_in = {p.name for p in bw.graph.find_nodes(op="placeholder")}
    saved = [a for a in outs[num_user_outputs:] if isinstance(a, torch.fx.Node) and a.name in bw_in]
    roots = [storage_root(a) for a in saved]
    return {r.name for r in roots if r.op != "placeholder" and r.name not in taken}
