"""Typed ``node.meta`` keys that memopt's passes read and write (one place, no string literals
scattered over passes)."""

from __future__ import annotations

#: int: position of a node among the activations the baseline partition saves for backward.
SAVED_INDEX = "memopt_saved_index"
#: int | None: index of the repeated layer this node belongs to.
LAYER = "memopt_layer"

# Keys that belong to torch (read only):
TORCH_RECOMPUTE = "recompute"  # torch.utils.checkpoint.CheckpointPolicy
TORCH_VAL = "val"
TORCH_ORIGINAL_ATEN = "original_aten"
TORCH_MODULE_STACK = "nn_module_stack"
TORCH_FWD_MODULE_STACK = "fwd_nn_module_stack"
TORCH_PARTITIONER_TAG = "partitioner_tag"
TORCH_SEQ_NR = "seq_nr"
