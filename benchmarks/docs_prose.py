"""Numbers in the docs' prose, checked against docs/data like the generated tables.

A measured number typed in a sentence is wrapped in an inline marker that markdown does not
show::

    at <!-- n:fsdp:s8:k1:over -->-1.2%<!-- /n --> step time

The key is ``NAME:ARG:ARG...``: ``VALUES[NAME]`` is called with the arguments (strings) and
returns the text; ``benchmarks/docs_numbers.py`` writes it between the markers and ``--check``
fails when the text differs. Arguments name a data file by its alias in ``FILES`` and, for
the FSDP2 step files, a row by its alias (:func:`row`). Every value is derived from the JSON
as the tables are (``benchmarks/docs_fmt.py``), so a re-measurement rewrites the prose too.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from benchmarks import docs_prose_core as core
from benchmarks import docs_prose_history as history
from benchmarks.docs_prose_base import MARKER  # noqa: F401 -- docs_numbers reads it here


def zoo_standing(what: str) -> str:
    """benchmarks/zoo_standing.py's count over docs/zoo.md's standing table: ``met`` (points
    where memopt's peak is at most torch's at most half its overhead, kernel time) or
    ``total`` (points measured)."""
    from benchmarks.zoo_standing import met, standing

    return str(dict(zip(("met", "total"), met(standing())))[what])


VALUES: dict[str, Callable[..., str]] = {
    "mg": core.mg,
    "pcie": core.pcie,
    "suite": core.suite,
    "first_hour": core.first_hour,
    "fsdp": core.fsdp,
    "fsdp_vs": core.fsdp_vs,
    "losses": core.losses,
    "cli": core.cli,
    "cli_ratio": core.cli_ratio,
    "pareto": core.pareto,
    "copies": core.copies,
    "batch": core.batch,
    "offload_bitwise": core.offload_bitwise,
    "zoo": core.zoo,
    "zoo_row": core.zoo_row,
    "zoo_pts": core.zoo_pts,
    "zoo_standing": zoo_standing,
    "zoo_cpu": core.zoo_cpu,
    "dpk": core.dpk,
    "peers": core.peers,
    "peers_range": core.peers_range,
    "peers_speedup": core.peers_speedup,
    "peers_slower": core.peers_slower,
    "host_floor": core.host_floor,
    "host_adamw": core.host_adamw,
    "host_adamw_ms": core.host_adamw_ms,
    "peers_first": core.peers_first,
    "peers_field": core.peers_field,
    "lbatch": history.lbatch,
    "freeze": history.freeze,
    "freeze_ms": history.freeze_ms,
    "plantime": history.plantime,
    "offbase": history.offbase,
    "offrow": history.offrow,
    "copy_at": history.copy_at,
    "pareto_pt": history.pareto_pt,
    "pareto_all": history.pareto_all,
    "pareto_pred": history.pareto_pred,
    "pareto_moved": history.pareto_moved,
    "offload_slower": history.offload_slower,
    "peers_saves": history.peers_saves,
    "peers_times": history.peers_times,
    "adamw24": history.adamw24,
    "gaps_op": history.gaps_op,
    "pareto_span": history.pareto_span,
    "pareto_var": history.pareto_var,
    "offspan": history.offspan,
    "stability": history.stability,
    "peers_ratio": history.peers_ratio,
    "peers_auto": history.peers_auto,
    "floor_calc": history.floor_calc,
    "adamw_runs": history.adamw_runs,
    "peers_lossdiff": history.peers_lossdiff,
    "peers_busy": history.peers_busy,
    "peers_need": history.peers_need,
    "host_range": history.host_range,
    "floor_share": history.floor_share,
    "lbatch_meta": history.lbatch_meta,
    "json": history.json_value,
    "prices": history.prices,
}


def value(key: str) -> str:
    """The text of ``key`` (``NAME:ARG:...``)."""
    name, *args = key.split(":")
    if name not in VALUES:
        raise KeyError(f"prose number {key!r}: unknown name; add it to docs_prose.VALUES")
    try:
        return VALUES[name](*args)
    except (KeyError, StopIteration, TypeError, FileNotFoundError) as e:
        raise KeyError(f"prose number {key!r}: {e}") from None


def rewrite(text: str) -> tuple[str, list[str]]:
    """``text`` with every prose number rendered afresh, and the keys found."""
    keys: list[str] = []

    def sub(m: re.Match) -> str:
        keys.append(m["key"])
        return f"<!-- n:{m['key']} -->{value(m['key'])}<!-- /n -->"

    return MARKER.sub(sub, text), keys
