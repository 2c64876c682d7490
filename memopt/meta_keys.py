"""Typed ``node.meta`` keys that memopt's passes read and write (one place, no string literals
scattered over passes)."""

from __future__ import annotations

#: int: position of a node among the activations the baseline partition saves for backward.
SAVED_INDEX = "memopt_saved_index"
#: memopt.passes.find_recompute_subgraphs.Subgraph: recompute candidate rooted at a saved node.
SUBGRAPH = "memopt_subgraph"
#: str: ORT-style cluster id of the subgraph rooted at this node (e.g. "BiasGelu+").
CLUSTER_ID = "memopt_cluster_id"
#: int: 0-based forward-order occurrence index of this node's subgraph within its cluster.
OCCURRENCE = "memopt_occurrence"
#: int | None: index of the repeated layer this node belongs to.
LAYER = "memopt_layer"
#: str: the decision applied to this node ("recompute", "compromise", "offload").
DECISION = "memopt_decision"

# Keys that belong to torch (read only):
TORCH_RECOMPUTE = "recompute"  # torch.utils.checkpoint.CheckpointPolicy
TORCH_VAL = "val"
TORCH_ORIGINAL_ATEN = "original_aten"
TORCH_MODULE_STACK = "nn_module_stack"
TORCH_FWD_MODULE_STACK = "fwd_nn_module_stack"
TORCH_PARTITIONER_TAG = "partitioner_tag"
TORCH_SEQ_NR = "seq_nr"
