"""Formatting for the docs' generated tables (benchmarks/docs_tables.py): sizes, percentages,
markdown tables, verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

GiB = 1 << 30


MiB = 1 << 20


def gib(b: float, nd: int = 2) -> str:
    return f"{b / GiB:.{nd}f}"


def pct(x: float, base: float, nd: int = 1) -> str:
    return f"{100 * (x / base - 1):+.{nd}f}%"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        cells = ("" if c is None else str(c) for c in r)
        out.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return "\n".join(out) + "\n"


def by_variant(data: dict) -> dict[str, dict]:
    return {r["variant"]: r for r in data["rows"]}


def verdict(memopt: float, half: float) -> str:
    """'met', or 'missed by X pt', on the rounded percentages the table shows."""
    m, h = round(memopt, 1), round(half, 1)
    return "met" if m <= h else f"missed by {m - h:.1f} pt"


def minus(s: str) -> str:
    return s.replace("-", "\u2212")


def size(b: int) -> str:
    return f"{b / GiB:.2f} GiB" if b >= GiB else f"{b / MiB:.0f} MiB"
