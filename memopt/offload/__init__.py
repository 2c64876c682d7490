"""Activation offload to the CPU with prefetch, placed by a per-layer synchronization dict.

* :mod:`memopt.offload.sync` -- the dict, its defaults and validation (plain data);
* :mod:`memopt.offload.region_layers` -- the user's layer numbering in a region holding a run
  of the model's layers (plain data);
* :mod:`memopt.offload.timeline` -- the per-layer diagram and bytes in flight;
* :mod:`memopt.offload.ops` -- the ``torch.ops.memopt`` copy ops, streams, pinned pool;
* ``memopt.passes.detect_layers`` / ``memopt.passes.insert_offload`` -- layer tags and the
  graph rewrite (with :mod:`~memopt.offload.units`, :mod:`~memopt.offload.slots`,
  :mod:`~memopt.offload.fx_helpers`); :mod:`memopt.offload.result` is what it returns
  (``tests/offload_check.py`` checks the invariants it must keep and
  ``tests/offload_partitioner.py`` runs it alone, for tests and the offload benchmark);
* :mod:`memopt.offload.trace` -- profiler trace summary (copy streams, overlap).

See docs/offload.md.
"""

from memopt.offload.sync import Schedule, SyncError, SyncPoint, build_schedule, default_sync
from memopt.offload.timeline import render_diagram, render_timeline

__all__ = [
    "Schedule",
    "SyncError",
    "SyncPoint",
    "build_schedule",
    "default_sync",
    "render_diagram",
    "render_timeline",
]
