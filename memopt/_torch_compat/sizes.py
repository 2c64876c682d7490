"""Comparing sizes that may be symbolic without adding guards (private API:
``torch.fx.experimental.symbolic_shapes``).

Python's ``==`` / ``!=`` on a SymInt asks the shape environment, which records the answer as a
guard; where the two sizes agree only at the traced value (a batch-sized ``8 * s0`` against a
static 16 at batch 2), the guard ``Eq(8*s0, 16)`` refines ``s0`` to that one value, and every
size derived after it is a constant: ``memopt plan``'s formulas stop scaling with the batch,
and a dynamic-shape training graph would be specialized. memopt's own bookkeeping (its memory
model's readers, the fused loss's shape checks) only ever needs "equal for every value"."""

from __future__ import annotations

from typing import Any


def known_equal(a: Any, b: Any) -> bool:
    """Whether two sizes (ints or SymInts) are equal for every value of their symbols; no
    guard is added (sizes equal only at the traced value are not equal here, as Inductor's
    ``statically_known_equals`` would say)."""
    import torch
    from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

    sizes = (int, torch.SymInt)
    if not (isinstance(a, sizes) and isinstance(b, sizes)):  # None: no size known
        return False
    if isinstance(a, int) and isinstance(b, int):
        return a == b

    return bool(statically_known_true(sym_eq(a, b)))
