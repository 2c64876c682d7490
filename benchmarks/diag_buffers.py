"""Which large buffers does Inductor's generated code allocate? (forward and backward ``call``)

Compiles one training step of a ``memopt plan`` model spec with ``memopt.optimize`` and prints,
for every compiled graph, each ``empty_strided`` allocation of at least ``--min-mib`` MiB with
the generated line that fills it and the ``del`` that frees it, plus the graph's return line.
Used to check the liveness model of ``memopt plan`` against what Inductor really allocates.

    python benchmarks/diag_buffers.py hf:gpt2 --config n_embd=1024 n_layer=24 n_head=16 \
        --batch 8 --seq 1024
"""

from __future__ import annotations

import math
import os
import re
import sys

import torch
import torch._inductor.graph as inductor_graph

import memopt

sys.path.insert(0, os.path.dirname(__file__))
from common import materialize_spec, spec_parser  # noqa: E402

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int64": 8, "bool": 1, "int32": 4}


def large_buffers(src: str, min_bytes: int) -> list[str]:
    body = src[src.index("def call(") :].splitlines()
    out = []
    for i, line in enumerate(body):
        m = re.search(r"(buf\d+) = empty_strided\w*\(\(([^)]*)\), \([^)]*\), torch\.(\w+)", line)
        if m:
            dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
            try:
                numel = math.prod(int(d) for d in dims)
            except ValueError:
                continue
            nbytes = numel * _DTYPE_BYTES.get(m.group(3), 4)
            if nbytes < min_bytes:
                continue
            name = m.group(1)
            uses = [j for j, x in enumerate(body) if re.search(rf"\b{name}\b", x) and j != i]
            freed = next((j for j in uses if re.search(rf"del .*\b{name}\b", body[j])), None)
            out.append(f"  {name} {nbytes / 2**20:.0f} MiB {m.group(3)} ({m.group(2)}) line {i}")
            for j in uses[:3]:
                out.append(f"      {j}: {body[j].strip()[:150]}")
            out.append(f"      freed at line {freed}" if freed is not None else "      never freed")
        if line.strip().startswith("return ("):
            out.append(f"  line {i} {line.strip()[:400]}")
    return out


def main() -> None:
    ap = spec_parser(__doc__)
    ap.add_argument("--min-mib", type=float, default=256)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    original = inductor_graph.GraphLowering.compile_to_module

    def compile_to_module(self):
        mod = original(self)
        with open(mod.__file__) as f:
            src = f.read()
        print(f"==== graph {mod.__file__.rsplit('/', 1)[-1]}")
        print("\n".join(large_buffers(src, int(args.min_mib * 2**20))), flush=True)
        return mod

    inductor_graph.GraphLowering.compile_to_module = compile_to_module
    built = materialize_spec(args, device)
    compiled = memopt.optimize(built.model, level=args.level)
    loss = compiled(*built.args, **built.kwargs).loss
    loss.backward()


if __name__ == "__main__":
    main()
