"""Plain-data description of what can be done with each saved activation (no FX inside).

The analysis passes produce :class:`SavedActivation` objects; the decision logic (:mod:`memopt.decide`)
and the report read only these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from memopt.plan import Strategy


class RootName(str):
    """A saved tensor's node name that also carries its stable plan id (``saved_id``).

    The node name is what the rewrites look the tensor up by, and compares and hashes as that
    name; ``saved_id`` (``Saved_<Op>_<module>_<k>+``, :func:`memopt.naming.saved_ids`) is how
    plan strings name a tensor that no cluster can recompute, the same run after run.
    ``memopt.decide.saved_id`` reads it; a plain ``str`` root falls back to its name.
    """

    saved_id: str

    def __new__(cls, name: str, saved_id: str) -> RootName:
        obj = super().__new__(cls, name)
        obj.saved_id = saved_id
        return obj

    def __reduce__(self):
        return (RootName, (str(self), self.saved_id))


@dataclass(frozen=True)
class SavedActivation:
    """One saved storage group of one compiled graph."""

    root: str  # node name of the storage owner in the joint graph (a RootName from the passes)
    members: tuple[str, ...]  # saved nodes that alias the root (root included if saved)
    cluster_id: str | None  # None when nothing can recompute it
    occurrence: int  # forward-order index within its cluster (-1 when cluster_id is None)
    nbytes: sympy.Expr  # symbolic bytes held by the saved storage
    savings: dict[Strategy, sympy.Expr] = field(default_factory=dict)  # per available strategy
    recompute_nodes: dict[Strategy, tuple[str, ...]] = field(default_factory=dict)
    boundary: dict[Strategy, tuple[str, ...]] = field(default_factory=dict)
    excluded_reason: str | None = None  # why full recompute is impossible
    layer: int | None = None
    note: str | None = None  # e.g. dropout recomputed from its saved mask
    dtype: str = ""
    shape: str = ""
    attention: bool = False
    """Recomputing it reruns a fused attention kernel. Levels leave such a tensor kept (the
    kernel costs more than the matmuls around it, and torch's selective checkpointing saves
    it too); a plan string or the budget planner may still recompute it."""

    @property
    def default_strategy(self) -> Strategy | None:
        if Strategy.RECOMPUTE in self.savings:
            return Strategy.RECOMPUTE
        if Strategy.COMPROMISE in self.savings:
            return Strategy.COMPROMISE
        return None
