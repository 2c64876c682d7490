"""Symbolic byte sizes.

Sizes come from ``node.meta["val"]`` (FakeTensors whose sizes may be SymInts). Shape-env symbols
(``s72``) are renamed after the graph inputs they measure (``inputs_input_ids_dim0``) using
dynamo's sources, so an expression reads ``8192*inputs_input_ids_dim0*inputs_input_ids_dim1``.
Static shapes give plain integers. Values are evaluated at the sizes of the call that compiled
the graph (the shape env's backed hints).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from memopt import _torch_compat as compat


@dataclass(frozen=True)
class SymbolTable:
    """How shape-env symbols map to readable names and to their values at compile time."""

    rename: Mapping[sympy.Symbol, sympy.Symbol]
    values: Mapping[str, int]  # readable name -> value

    @staticmethod
    def empty() -> SymbolTable:
        return SymbolTable({}, {})

    def readable(self, expr: sympy.Expr) -> sympy.Expr:
        return sympy.expand(expr.xreplace(self.rename)) if self.rename else sympy.expand(expr)

    def evaluate(self, expr: sympy.Expr) -> int | None:
        """Integer value of a readable expression, or None if a symbol has no known value."""
        subs = {sympy.Symbol(k, integer=True, positive=True): v for k, v in self.values.items()}
        subs.update({sympy.Symbol(k): v for k, v in self.values.items()})
        v = sympy.sympify(expr).xreplace(subs)
        if isinstance(v, int):  # torch's sympy functions (CeilToInt, ...) may fold to an int
            return v
        return int(v) if getattr(v, "is_number", False) else None


def build_symbol_table(inputs: Sequence[Any]) -> SymbolTable:
    """Read the shape env of ``inputs`` (fake tensors) and name every symbol."""
    shape_env = compat.detect_shape_env(inputs)
    values = compat.symbol_values(shape_env)
    sources = compat.symbol_sources(shape_env)
    rename: dict[sympy.Symbol, sympy.Symbol] = {}
    named: dict[str, int] = {}
    used: set[str] = set()
    for sym in sorted(values, key=lambda s: str(s)):
        srcs = sources.get(sym) or []
        if srcs:
            base, dim = sorted(srcs)[0]
            name = f"inputs_{base}_dim{dim}"
        else:
            name = str(sym)
        while name in used:
            name += "_"
        used.add(name)
        new = sympy.Symbol(name, integer=True, positive=True)
        rename[sym] = new
        named[name] = values[sym]
    return SymbolTable(rename, named)


def tensor_bytes_expr(val: Any) -> sympy.Expr | None:
    """``numel * itemsize`` of a (fake) tensor as a sympy expression; None for non-tensors."""
    if not isinstance(val, torch.Tensor):
        return None
    return compat.sym_expr(val.numel()) * val.element_size()


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"
