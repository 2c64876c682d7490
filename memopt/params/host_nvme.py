"""The NVMe tier of :class:`memopt.params.HostAdamW`: host shards' ``exp_avg`` / ``exp_avg_sq``
in a file, streamed through two buffer pairs while the update runs.

    per queued task (an FSDP2 group's parameters p0, p1, ...):
        read m, v of p[i+1] (after the write that last used its buffer)
        update p[i] with the buffer pair i % 2 as its m, v
        write m, v of p[i] back (one writer thread: writes land in order)

The moments never live in host memory beyond the two buffer pairs (each the size of the largest
shard); the fp32 values are the same as in memory, so the update is bitwise the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future

import torch

from memopt.params.nvme import NvmeStore


class MomentFile:
    """fp32 ``exp_avg`` then ``exp_avg_sq`` of each registered shard, at fixed offsets."""

    def __init__(self, directory: str, sizes: Sequence[tuple[int, int]]) -> None:
        """``sizes``: ``(key, numel)`` per shard (the key is the parameter's id)."""
        self.offsets: dict[int, tuple[int, int]] = {}
        pos = 0
        for key, n in sizes:
            self.offsets[key] = (pos, n)
            pos += 8 * n
        self.nbytes = pos
        self.store = NvmeStore(directory, max(pos, 1), name="memopt-host-adamw")  # zeros
        biggest = max((n for _, n in sizes), default=0)
        self._bufs = [torch.empty(2, biggest) for _ in range(2)]

    def __contains__(self, key: int) -> bool:
        return key in self.offsets

    def read(self, key: int, out_m: torch.Tensor, out_v: torch.Tensor, after=None) -> list:
        pos, n = self.offsets[key]
        m = self.store.read(pos, out_m.view(-1), after)
        return [m, self.store.read(pos + 4 * n, out_v.view(-1), after)]

    def write(self, key: int, m: torch.Tensor, v: torch.Tensor) -> Future:
        pos, n = self.offsets[key]
        self.store.write(pos, m.contiguous().view(-1))
        return self.store.write(pos + 4 * n, v.contiguous().view(-1))

    def run(self, keys: Sequence[int], update: Callable[[int, torch.Tensor, torch.Tensor], None]):
        """``update(i, m, v)`` for each ``keys[i]`` with its moments read from the file into a
        buffer pair and written back after; reads and writes overlap the updates."""
        writes: list[Future | None] = [None, None]

        def load(i: int) -> list:
            n = self.offsets[keys[i]][1]
            m, v = self._bufs[i % 2]
            return self.read(keys[i], m[:n], v[:n], after=writes[i % 2])

        pending = load(0) if keys else []
        for i, key in enumerate(keys):
            for f in pending:
                f.result()
            if i + 1 < len(keys):
                pending = load(i + 1)
            n = self.offsets[key][1]
            m, v = (b[:n] for b in self._bufs[i % 2])
            update(i, m, v)
            writes[i % 2] = self.write(key, m, v)
        for w in writes:
            if w is not None:
                w.result()

    def close(self) -> None:
        self.store.close()
