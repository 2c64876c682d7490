"""Synthetic planning problems: a stack of identical layers, for tests, docs and benchmarks.

Layout of the step (``m`` ops per layer in forward and in backward)::

    forward:  [embed] [layer 0: m ops] ... [layer n-1: m ops] [loss]
    backward: [loss'] [layer n-1: m ops] ... [layer 0: m ops] [embed']

A :class:`LayerTensor` is produced by op ``slot`` of its layer's forward and first used by op
``m-1-slot`` of that layer's backward (the last forward op's outputs are needed first).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from memopt.planner.problem import Candidate, OpCost, PlanningProblem, StepTimeline

MiB = 1 << 20


@dataclass(frozen=True)
class LayerTensor:
    """One saved activation that every layer produces."""

    cluster_id: str
    nbytes: int
    slot: int
    recompute_ops: tuple[OpCost, ...] | None = None
    """None: not recomputable."""
    compromise_kept_bytes: int | None = None
    compromise_ops: tuple[OpCost, ...] | None = None
    offloadable: bool = True


def layered_problem(
    tensors: Sequence[LayerTensor],
    *,
    n_layers: int,
    ops_per_layer: int,
    fwd_op_s: float,
    bwd_op_s: float | None = None,
    live_bytes: int = 0,
    static_bytes: int = 0,
    fixed: dict[str, tuple[int, int]] | None = None,
) -> PlanningProblem:
    """``n_layers`` identical layers, each saving ``tensors``; every op takes ``fwd_op_s``
    (``bwd_op_s`` in backward, default twice that) and ``live_bytes`` of other memory."""
    m = ops_per_layer
    if any(not 0 <= t.slot < m for t in tensors):
        raise ValueError("a slot lies outside the layer")
    bwd_op_s = 2 * fwd_op_s if bwd_op_s is None else bwd_op_s
    n_ops = n_layers * m + 2
    tl = StepTimeline(
        fwd_op_s=(fwd_op_s,) * n_ops,
        bwd_op_s=(bwd_op_s,) * n_ops,
        fwd_live_bytes=(live_bytes,) * n_ops,
        bwd_live_bytes=(live_bytes,) * n_ops,
        static_bytes=static_bytes,
        layer_fwd_start=tuple(1 + layer * m for layer in range(n_layers)),
        layer_bwd_start=tuple(1 + (n_layers - 1 - layer) * m for layer in range(n_layers)),
    )
    cands = []
    for layer in range(n_layers):
        for t in tensors:
            cands.append(
                Candidate(
                    name=f"{t.cluster_id.rstrip('+').replace('+', '_')}_{layer}",
                    cluster_id=t.cluster_id,
                    occurrence=layer,
                    layer=layer,
                    nbytes=t.nbytes,
                    produce_pos=tl.layer_fwd_start[layer] + t.slot,
                    first_bwd_use_pos=tl.layer_bwd_start[layer] + m - 1 - t.slot,
                    recomputable=t.recompute_ops is not None,
                    recompute_ops=t.recompute_ops or (),
                    compromise_kept_bytes=t.compromise_kept_bytes,
                    compromise_ops=t.compromise_ops,
                    offloadable=t.offloadable,
                )
            )
    return PlanningProblem(candidates=tuple(cands), timeline=tl, fixed=fixed or {})


def random_layer_tensors(
    rng: random.Random, n_clusters: int, ops_per_layer: int
) -> list[LayerTensor]:
    """Clusters with random sizes (1..64 MiB), costs and strategy sets."""
    out = []
    for k in range(n_clusters):
        rec = None
        if rng.random() < 0.8:
            rec = tuple(
                OpCost(flops=rng.choice([0, 1e9, 1e11]), bytes=rng.randint(1, 64) * MiB)
                for _ in range(rng.randint(1, 3))
            )
        nbytes = rng.randint(1, 64) * MiB
        kept = nbytes // 2 if rec is not None and rng.random() < 0.3 else None
        out.append(
            LayerTensor(
                cluster_id=f"C{k}+",
                nbytes=nbytes,
                slot=rng.randrange(ops_per_layer),
                recompute_ops=rec,
                compromise_kept_bytes=kept,
                offloadable=rng.random() < 0.7,
            )
        )
    return out
