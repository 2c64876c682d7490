"""Activation offload to the CPU with prefetch, placed by a per-layer synchronization dict.

* :mod:`memopt.offload.sync` -- the dict, its defaults and validation (plain data);
* :mod:`memopt.offload.timeline` -- the per-layer diagram and bytes in flight;
* :mod:`memopt.offload.ops` -- the ``torch.ops.memopt`` copy ops, streams, pinned pool;
* ``memopt.passes.insert_offload`` -- the graph rewrite (``memopt.passes.detect_layers``
  tags the layers it reads);
* :mod:`memopt.offload.partition` -- a stand-alone partitioner running both passes.

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
