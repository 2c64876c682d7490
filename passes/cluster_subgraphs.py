"""cluster_subgraphs_pass: name each recompute subgraph ORT-style and number its occurrences.

Reads the subgraphs find_recompute_subgraphs_pass returned; writes nothing on the graph and
returns plain :class:`memopt.candidates.SavedActivation` objects with symbolic byte sizes and
savings.

A tensor outside the repeated layers whose cluster id also names tensors inside them gets its
own id, the module it was made in appended (``MatMul+In_lm_head+``): plans count a cluster's
occurrences in forward order, so a vocabulary projection sharing ``MatMul+`` with the layers'
projections could only be recomputed after all of them (torch's min-cut with a memory budget
recomputes the logits and keeps the layers' matmuls; memopt's planner could not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy
import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import meta_keys as mk
from memopt.candidates import RootName, SavedActivation
from memopt.facts import op_class, tensor_val
from memopt.naming import _NON_WORD, _module_path, cluster_id, saved_ids
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


def _reruns_attention(sg: Subgraph) -> bool:
    """Whether a strategy of ``sg`` recomputes an attention kernel."""
    searches = [s for s in (sg.full, sg.compromise) if s is not None and s.reason is None]
    return any(op_class(n) == "attention" for s in searches for n in s.nodes)


def _own_ids(subgraphs: Sequence[Subgraph], ids: list[str | None]) -> list[str | None]:
    """``ids`` with each id of a root outside the layers that is also an id inside them made
    its own: ``<id>In_<module path>+`` (roots made outside any module keep theirs)."""
    in_layers = {
        cid
        for sg, cid in zip(subgraphs, ids)
        if cid and sg.group.root.meta.get(mk.LAYER) is not None
    }
    out = []
    for sg, cid in zip(subgraphs, ids):
        root = sg.group.root
        module = "_".join(p for p in _NON_WORD.split(_module_path(root)) if p)
        if cid in in_layers and root.meta.get(mk.LAYER) is None and module:
            cid = f"{cid}In_{module}+"
        out.append(cid)
    return out


Strategies = tuple[dict, dict, dict, tuple]


def _rng_state_charges(subgraphs: Sequence[Subgraph]) -> list[int]:
    """Per subgraph: bytes of RNG state its full recompute makes the partitioner save. A
    recomputed op with the ``nondeterministic_seeded`` tag (an SDPA kernel, even without
    dropout before torch 2.14: memopt._torch_compat.recompute_saves_rng_state) has its RNG
    state saved in the forward; the first subgraph rerunning the op pays it (SDPA's output
    and logsumexp share one kernel)."""
    charges = [0] * len(subgraphs)
    paid: set[torch.fx.Node] = set()
    for i, sg in enumerate(subgraphs):
        for n in sg.full.nodes if sg.full.reason is None else ():
            if n in paid or n.op != "call_function" or not compat.recompute_saves_rng_state(n):
                continue
            paid.add(n)
            q = next((v for a in n.all_input_nodes if (v := tensor_val(a)) is not None), None)
            if q is not None:  # the kernel's device: its first tensor input's
                charges[i] += compat.seeded_recompute_state_bytes(q.device)
    return charges


def _not_positive(saving: sympy.Expr) -> bool:
    return bool(saving.is_number and saving <= 0)


def _layout_copy_charges(
    subgraphs: Sequence[Subgraph], copies: Mapping[str, sympy.Expr]
) -> list[sympy.Expr]:
    """Per subgraph: bytes of the channels-last input copies its full recompute makes the
    forward save (``copies``: ``memopt.facts.LayoutCopies.if_saved``, by input name);
    the first subgraph reading an input pays for it."""
    charges: list[sympy.Expr] = [sympy.Integer(0)] * len(subgraphs)
    paid: set[str] = set()
    for i, sg in enumerate(subgraphs):
        for n in sg.full.inputs if sg.full.reason is None else ():
            if n.name in copies and n.name not in paid:
                paid.add(n.name)
                charges[i] += copies[n.name]
    return charges


def _strategies(
    sg: Subgraph,
    nbytes: sympy.Expr,
    symbols: SymbolTable,
    rng_state: int = 0,
    copies: sympy.Expr | int = 0,
) -> Strategies:
    """Savings, recompute nodes and boundary per available strategy, and the nodes the
    cluster id is made of (empty when no strategy applies). ``rng_state`` and ``copies``:
    bytes the full recompute adds to what is saved (:func:`_rng_state_charges`,
    :func:`_layout_copy_charges`); a recompute whose copies outweigh what it frees is no
    strategy."""
    savings: dict[Strategy, sympy.Expr] = {}
    nodes: dict[Strategy, tuple[str, ...]] = {}
    boundary: dict[Strategy, tuple[str, ...]] = {}
    name_from: tuple[torch.fx.Node, ...] = ()
    saving = sympy.expand(nbytes - rng_state - copies)
    if sg.full.reason is None and sg.full.nodes and not (copies != 0 and _not_positive(saving)):
        savings[Strategy.RECOMPUTE] = saving
        nodes[Strategy.RECOMPUTE] = tuple(n.name for n in sg.full.nodes)
        boundary[Strategy.RECOMPUTE] = tuple(n.name for n in sg.full.inputs)
        name_from = sg.full.nodes
    if sg.compromise is not None and sg.compromise_stash is not None:
        saving = sympy.expand(nbytes - _bytes(sg.compromise_stash, symbols))
        if not _not_positive(saving):
            savings[Strategy.COMPROMISE] = saving
            nodes[Strategy.COMPROMISE] = tuple(n.name for n in sg.compromise.nodes)
            boundary[Strategy.COMPROMISE] = tuple(n.name for n in sg.compromise.inputs)
            name_from = name_from or sg.compromise.nodes
    return savings, nodes, boundary, name_from


def cluster_subgraphs_pass(
    gm: torch.fx.GraphModule,
    subgraphs: Sequence[Subgraph],
    symbols: SymbolTable,
    layout_copies: Mapping[str, sympy.Expr] | None = None,
) -> tuple[torch.fx.GraphModule, list[SavedActivation]]:
    """``layout_copies``: graph inputs a recompute reading them would save as channels-last
    copies (``memopt.facts.LayoutCopies.if_saved``); their bytes come off its saving."""
    counts: dict[str, int] = {}
    out: list[SavedActivation] = []
    stable = saved_ids([sg.group.root for sg in subgraphs])
    sizes = [_bytes(sg.group.root, symbols) for sg in subgraphs]
    # named as the other sizes are (a raw symbol left a saving without a value: s97)
    readable = {k: symbols.readable(sympy.sympify(v)) for k, v in (layout_copies or {}).items()}
    copies = _layout_copy_charges(subgraphs, readable)
    charges = zip(_rng_state_charges(subgraphs), copies)
    found = [_strategies(sg, b, symbols, *c) for sg, b, c in zip(subgraphs, sizes, charges)]
    ids = _own_ids(subgraphs, [(cluster_id(f[3]) or None) if f[3] else None for f in found])
    for sg, sid, nbytes, (savings, nodes, boundary, name_from), cid in zip(
        subgraphs, stable, sizes, found, ids
    ):
        root = sg.group.root
        note = None
        if name_from and any(_from_random_op(n) for n in name_from):
            note = "recomputes dropout from its saved mask (same random numbers)"
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
                attention=_reruns_attention(sg),
            )
        )
    return gm, out
