"""GPU time per phase of a training step (benchmarks/multi_gpu.py): CUDA events at the step's
start and after its forward, backward and optimizer step, no synchronization between them,
and what the caching allocator did over the timed steps. An event span holds the GPU's idle
time too (waiting for the host to issue the next kernel); the kernels' own time per phase
(``kernel_ms``, over a few steps under ``torch.profiler``) does not, so the two together say
whether a slower phase ran more kernels or waited for its host."""

from __future__ import annotations

import os

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
        with torch.profiler.record_function("phase_fwd"):
            loss = compiled(input_ids=ids, labels=ids).loss
        self.mark()
        loss.backward()  # its kernels are launched by autograd's device thread, not in a range
        self.mark()
        with torch.profiler.record_function("phase_opt"):
            opt.step()
        self.mark()
        return loss

    def start(self) -> None:
        """The timed steps begin: earlier marks dropped, the allocator's counts read."""
        self.marks.clear()
        self.before = torch.cuda.memory_stats() if self.cuda else {}

    def result(self, step=None, n: int = 3) -> dict:
        """Per timed step, the GPU's milliseconds per phase; the allocator's retries (a cache
        flush and a fresh cudaMalloc), device allocations and frees over the timed steps; with
        ``step``, the kernels' own milliseconds per phase over ``n`` more steps."""
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
        if step is not None:
            try:
                out["kernel_ms"] = kernel_ms_by_phase(step, n)
            except Exception as e:  # recorded; the event times stand
                out["kernel_ms_error"] = f"{type(e).__name__}: {e}"[:300]
        return out


def kernel_ms_by_phase(step, n: int) -> dict:
    """The kernels' own milliseconds per step over ``n`` profiled steps: in all, launched
    inside the forward's and the optimizer's ranges, and the rest (the backward's)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    rows, names = prof.key_averages(), ("phase_fwd", "phase_opt")
    # a range is on the GPU's timeline too (its span, as a CUDA row of its name): not a kernel
    total = sum(
        e.self_device_time_total
        for e in rows
        if e.device_type == DeviceType.CUDA and e.key not in names
    )
    table = os.environ.get("MEMOPT_BENCH_PROFILE_TABLE")  # PATH: the host's busiest ops, appended
    if table:
        with open(table, "a") as f:
            f.write(rows.table(sort_by="self_cpu_time_total", row_limit=30) + "\n\n")
    ranges = {e.key: e.device_time_total for e in rows if e.device_type == DeviceType.CPU}
    fwd, opt = ranges.get("phase_fwd", 0.0), ranges.get("phase_opt", 0.0)
    ms = {"fwd": fwd, "bwd": total - fwd - opt, "opt": opt, "all": total}
    return {**{k: round(v / 1e3 / n, 3) for k, v in ms.items()}, "ranges_apart": True}
