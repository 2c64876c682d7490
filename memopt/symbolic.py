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
import torch.fx

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

    def with_graph(self, gm: torch.fx.GraphModule) -> SymbolTable:
        """The table plus the symbols of ``gm``'s sizes it lacks, at their hints: the
        partitioner can trace sizes symbolically from static inputs (the RNG state a
        checkpointed region saves)."""
        values = dict(self.values)
        for sym, hint in _graph_hints(gm).items():
            name = str(self.rename.get(sym, sym))
            if name not in values and hint is not None:
                values[name] = hint
        return self if values == self.values else SymbolTable(self.rename, values)

    def evaluate(self, expr: sympy.Expr) -> int | None:
        """Integer value of a readable expression, or None if a symbol has no known value."""
        subs = {sympy.Symbol(k, integer=True, positive=True): v for k, v in self.values.items()}
        subs.update({sympy.Symbol(k): v for k, v in self.values.items()})
        v = sympy.sympify(expr).xreplace(subs)
        if isinstance(v, int):  # torch's sympy functions (CeilToInt, ...) may fold to an int
            return v
        return int(v) if getattr(v, "is_number", False) else None


def build_symbol_table(
    inputs: Sequence[Any], gm: torch.fx.GraphModule | None = None
) -> SymbolTable:
    """Read the shape env of ``inputs`` (fake tensors) and name every symbol. With static
    inputs, a graph whose values still carry symbols (a checkpointed region saves the RNG
    state, whose size is traced symbolically) gives its shape env through ``gm``."""
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


def _graph_hints(gm: torch.fx.GraphModule) -> dict[sympy.Symbol, int | None]:
    """Symbols that appear as sizes of the graph's tensors, with their hints."""
    out: dict[sympy.Symbol, int | None] = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, list | tuple) else (val,):
            for d in v.shape if isinstance(v, torch.Tensor) else ():
                expr = d.node.expr if isinstance(d, torch.SymInt) else None
                if isinstance(expr, sympy.Symbol) and expr not in out:
                    out[expr] = compat.int_hint(d) if d.node.has_hint() else None
    return out


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
