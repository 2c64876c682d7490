"""How much do host copies on a side stream slow the compute stream down?

The planner's time model lets copies hide behind compute for free. Measured offload plans cost
2-3.4 ms more per offloaded GiB than it predicts. This script separates the two candidate
causes:

* **physics**: a workload (a matmul loop, a memory-bound copy loop, a compiled training step of
  the pareto Llama) timed alone and while a side stream copies pinned host <-> device memory
  for its whole duration (D2H, H2D, both). ``slowdown`` = extra compute seconds per second of
  concurrent copying;
* **memopt's offload path**: the same training step with ``memopt.optimize(offload_layers=k)``,
  against the step plus foreign copies of the same bytes.

    python benchmarks/copy_interference.py --out interference.json      # on the GPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

from common import add_model_args, gpu_ms, hf_model, lm_step  # noqa: E402

MiB = 1 << 20


class Copier:
    """Chunked pinned <-> device copies on their own streams (one per direction)."""

    def __init__(self, total_bytes: int, chunk: int):
        self.chunk = chunk
        self.n = max(1, total_bytes // chunk)
        self.dev = torch.empty(self.n * chunk, dtype=torch.uint8, device="cuda")
        self.host = torch.empty(self.n * chunk, dtype=torch.uint8, pin_memory=True)
        self.dev2 = torch.empty_like(self.dev)
        self.host2 = torch.empty(self.n * chunk, dtype=torch.uint8, pin_memory=True)
        self.d2h_stream, self.h2d_stream = torch.cuda.Stream(), torch.cuda.Stream()

    def issue(self, direction: str, nbytes: int) -> list[torch.cuda.Event]:
        """Enqueue ``nbytes`` of copies (rounded to chunks); events (start, end) per direction."""
        n = min(self.n, max(1, nbytes // self.chunk))
        marks = []
        for d in ("d2h", "h2d") if direction == "both" else (direction,):
            stream = self.d2h_stream if d == "d2h" else self.h2d_stream
            stream.wait_stream(torch.cuda.current_stream())
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                s.record()
                for i in range(n):
                    sl = slice(i * self.chunk, (i + 1) * self.chunk)
                    if d == "d2h":
                        self.host[sl].copy_(self.dev[sl], non_blocking=True)
                    else:
                        self.dev2[sl].copy_(self.host2[sl], non_blocking=True)
                e.record()
            marks.append((s, e))
        return marks

    def rate(self, direction: str) -> float:
        """Bytes/s of one direction alone."""
        (s, e), *_ = self.issue(direction, 512 * MiB)
        torch.cuda.synchronize()
        return (512 * MiB // self.chunk * self.chunk) / (s.elapsed_time(e) / 1e3)


def interference(fn, copier: Copier, reps: int, rates: dict) -> dict:
    """``fn`` alone and under continuous copies in each direction."""
    fn()
    torch.cuda.synchronize()
    alone = statistics.median(gpu_ms(fn, reps))
    row = {"alone_ms": alone}
    for direction in ("d2h", "h2d", "both"):
        # enough copy work to outlast fn (1.3x), so fn overlaps copies for its whole duration
        rate = max(rates["d2h"], rates["h2d"])
        nbytes = int(1.3 * alone / 1e3 * rate)
        samples = []
        for _ in range(reps):
            torch.cuda.synchronize()
            marks = copier.issue(direction, nbytes)
            samples += gpu_ms(fn, 1)
            torch.cuda.synchronize()
            covered = all(s.elapsed_time(e) >= 0.95 * samples[-1] for s, e in marks)
            if not covered:
                row.setdefault("uncovered", 0)
                row["uncovered"] += 1
        ms = statistics.median(samples)
        row[direction] = {"ms": ms, "slowdown": (ms - alone) / alone}
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--chunks", default="4,64", help="copy chunk sizes in MiB")
    add_model_args(p)
    p.add_argument("--ks", default="1,2", help="memopt offload_layers values to time")
    p.add_argument("--out")
    args = p.parse_args()
    import memopt

    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}

    def save(row):
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    big2 = torch.empty_like(big)

    def matmuls():
        for _ in range(20):
            torch.mm(a, b)

    def hbm():
        for _ in range(40):
            big2.copy_(big)

    model = hf_model(args.model, args.layers, args.hidden)
    ids = torch.randint(0, 32000, (args.batch, args.seq), device="cuda")
    torch._dynamo.reset()
    compiled_step = lm_step(model, torch.compile(model), ids)
    for chunk_mib in [int(c) for c in args.chunks.split(",")]:
        copier = Copier(4 << 30, chunk_mib * MiB)
        rates = {"d2h": copier.rate("d2h"), "h2d": copier.rate("h2d")}
        save({"what": "rates", "chunk_mib": chunk_mib, **rates})
        for name, fn in (("matmul", matmuls), ("hbm copy", hbm), ("llama step", compiled_step)):
            save(
                {"what": name, "chunk_mib": chunk_mib, **interference(fn, copier, args.reps, rates)}
            )
        del copier

    # memopt's offload path against foreign copies of the same bytes
    base = statistics.median(gpu_ms(compiled_step, args.reps))
    copier = Copier(4 << 30, 64 * MiB)
    for k in [int(x) for x in args.ks.split(",") if x]:
        torch._dynamo.reset()
        c = memopt.optimize(model, offload_layers=k)
        step = lm_step(model, c, ids)
        step()
        torch.cuda.synchronize()
        ms = statistics.median(gpu_ms(step, args.reps))
        nbytes = memopt.report(c).offloaded_bytes()
        foreign = []
        for _ in range(args.reps):
            torch.cuda.synchronize()
            marks = copier.issue("d2h", nbytes)
            foreign += gpu_ms(compiled_step, 1)
            torch.cuda.synchronize()
        foreign_ms = statistics.median(foreign)
        copy_ms = marks[0][0].elapsed_time(marks[0][1])
        save(
            {
                "what": "memopt offload",
                "k": k,
                "offloaded_bytes": nbytes,
                "compile_ms": base,
                "memopt_ms": ms,
                "foreign_d2h_ms": foreign_ms,
                "foreign_copy_ms": copy_ms,
            }
        )


if __name__ == "__main__":
    main()
