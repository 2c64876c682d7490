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

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk
from memopt.facts import MATMUL_OPERANDS, alias_users, aliased_input, is_view, packet, storage_root

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
    if is_view(node):
        return True
    tags = getattr(node.target, "tags", ())
    if torch.Tag.pointwise in tags or torch.Tag.reduction in tags:
        return True
    return getattr(node.target, "__name__", "").split(".")[0] in _FUSIBLE_NAMES


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


def materialized(n: torch.fx.Node) -> bool:
    """Whether ``n``'s value is written to memory by some kernel (placeholders, extern kernels
    and their inputs, reductions, graph outputs); otherwise Inductor fuses it into the kernels
    that consume it and it never exists."""
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


def start(node: torch.fx.Node, pos: dict[torch.fx.Node, int]) -> int:
    """Where a temporary begins. A padded copy (``constant_pad_nd``, what Inductor's ``pad_mm``
    inserts before a matmul) is computed by the kernel that makes its input, not next to its
    matmul: it is live from there (the two padded copies of the LM head's gradient coexist)."""
    if getattr(node.target, "__name__", "").split(".")[0] == "constant_pad_nd" and node.args:
        src = node.args[0]
        if isinstance(src, torch.fx.Node) and storage_root(src) in pos:
            return min(pos[storage_root(src)], pos[node])
    return pos[node]


def padded_copies(
    ops: list[torch.fx.Node], pos: dict[torch.fx.Node, int]
) -> list[tuple[torch.fx.Node, sympy.Rational, int, int]]:
    """``(operand, size factor, start, end)`` of each padded matmul operand copy among ``ops``:
    live from the kernel that makes the operand (see :func:`start`) to its matmul."""
    out = []
    for n in ops:
        for operand, factor in padded_operands(n):
            out.append((operand, factor, pos.get(storage_root(operand), pos[n]), pos[n]))
    return out
