"""GPU time per phase of a training step (benchmarks/multi_gpu.py): CUDA events at the step's
start and after its forward, backward and optimizer step, no synchronization between them,
and what the caching allocator did over the timed steps."""

from __future__ import annotations

import torch

PHASES = ("fwd", "bwd", "opt")
ALLOCATOR = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_ooms")


class StepPhases:
    def __init__(self, cuda: bool):
        self.cuda, self.marks, self.before = cuda, [], {}

    def mark(self) -> None:
        """A phase ends (or the step begins) here; call it 4 times per step."""
        if self.cuda:
            self.marks.append(torch.cuda.Event(enable_timing=True))
            self.marks[-1].record()

    def lm_step(self, opt, compiled, ids):
        """One training step of a causal LM on ``ids`` as its own labels, marked."""
        self.mark()
        opt.zero_grad(set_to_none=True)
        loss = compiled(input_ids=ids, labels=ids).loss
        self.mark()
        loss.backward()
        self.mark()
        opt.step()
        self.mark()
        return loss

    def start(self) -> None:
        """The timed steps begin: earlier marks dropped, the allocator's counts read."""
        self.marks.clear()
        self.before = torch.cuda.memory_stats() if self.cuda else {}

    def result(self) -> dict:
        """Per timed step, the GPU's milliseconds per phase; the allocator's retries (a cache
        flush and a fresh cudaMalloc), device allocations and frees over the timed steps."""
        if not self.marks:
            return {}
        m = self.marks
        out: dict = {"gpu_ms": {}}
        for i, name in enumerate(PHASES):
            out["gpu_ms"][name] = [
                round(m[k + i].elapsed_time(m[k + i + 1]), 3) for k in range(0, len(m), 4)
            ]
        after = torch.cuda.memory_stats()
        out.update({k: after.get(k, 0) - self.before.get(k, 0) for k in ALLOCATOR})
        return out
