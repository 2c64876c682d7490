"""cluster_subgraphs_pass: name each recompute subgraph ORT-style and number its occurrences.

Reads the subgraphs find_recompute_subgraphs_pass returned; writes nothing on the graph and
returns plain :class:`memopt.candidates.SavedActivation` objects with symbolic byte sizes and
savings.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch
import torch.fx

from memopt import meta_keys as mk
from memopt.candidates import RootName, SavedActivation
from memopt.naming import cluster_id, saved_ids
from memopt.passes.find_recompute_subgraphs import Subgraph
from memopt.plan import Strategy
from memopt.symbolic import SymbolTable, tensor_bytes_expr


def _bytes(node: torch.fx.Node, symbols: SymbolTable) -> sympy.Expr:
    e = tensor_bytes_expr(node.meta.get(mk.TORCH_VAL))
    return symbols.readable(e if e is not None else sympy.Integer(0))


_RANDOM_SOURCES = frozenset(
    {
        "native_dropout",
        "dropout",
        "bernoulli",
        "feature_dropout",
        "alpha_dropout",
        "rand_like",
        "randn_like",
    }
)


def _from_random_op(node: torch.fx.Node) -> bool:
    orig = node.meta.get(mk.TORCH_ORIGINAL_ATEN)
    return orig is not None and getattr(orig, "__name__", "").split(".")[0] in _RANDOM_SOURCES


def cluster_subgraphs_pass(
    gm: torch.fx.GraphModule, subgraphs: Sequence[Subgraph], symbols: SymbolTable
) -> tuple[torch.fx.GraphModule, list[SavedActivation]]:
    counts: dict[str, int] = {}
    out: list[SavedActivation] = []
    stable = saved_ids([sg.group.root for sg in subgraphs])
    for sg, sid in zip(subgraphs, stable):
        root = sg.group.root
        nbytes = _bytes(root, symbols)
        savings: dict[Strategy, sympy.Expr] = {}
        nodes: dict[Strategy, tuple[str, ...]] = {}
        boundary: dict[Strategy, tuple[str, ...]] = {}
        name_from = None
        if sg.full.reason is None and sg.full.nodes:
            savings[Strategy.RECOMPUTE] = nbytes
            nodes[Strategy.RECOMPUTE] = tuple(n.name for n in sg.full.nodes)
            boundary[Strategy.RECOMPUTE] = tuple(n.name for n in sg.full.inputs)
            name_from = sg.full.nodes
        if sg.compromise is not None and sg.compromise_stash is not None:
            saving = sympy.expand(nbytes - _bytes(sg.compromise_stash, symbols))
            if not (saving.is_number and saving <= 0):
                savings[Strategy.COMPROMISE] = saving
                nodes[Strategy.COMPROMISE] = tuple(n.name for n in sg.compromise.nodes)
                boundary[Strategy.COMPROMISE] = tuple(n.name for n in sg.compromise.inputs)
                name_from = name_from or sg.compromise.nodes
        cid = cluster_id(name_from) if name_from else None
        note = None
        if name_from and any(_from_random_op(n) for n in name_from):
            note = "recomputes dropout from its saved mask (same random numbers)"
        if cid == "":
            cid = None
        occ = -1
        if cid is not None:
            occ = counts.get(cid, 0)
            counts[cid] = occ + 1
        val = root.meta.get(mk.TORCH_VAL)
        out.append(
            SavedActivation(
                root=RootName(root.name, sid),
                members=tuple(m.name for m in sg.group.members),
                cluster_id=cid,
                occurrence=occ,
                nbytes=nbytes,
                savings=savings,
                recompute_nodes=nodes,
                boundary=boundary,
                excluded_reason=sg.full.reason,
                note=note,
                layer=root.meta.get(mk.LAYER),
                dtype=str(val.dtype).replace("torch.", "") if val is not None else "",
                shape=str(tuple(val.shape)) if val is not None else "",
            )
        )
    return gm, out
