"""What is live at the peak of a training step? A CUDA memory-history replay.

Runs ``memopt.optimize(model, level=L)`` training steps (AdamW fused, bf16) on a ``memopt plan``
model spec, records the allocator's history during one steady-state step, replays it to find
the peak and prints the blocks live there, largest first, with the innermost frame that
allocated them (Inductor's generated code names the buffer). Compare with
``memopt plan ... --json`` to see what the prediction misses.

    python benchmarks/diag_peak.py hf:gpt2 --config n_embd=1024 n_layer=24 n_head=16 \
        --batch 8 --seq 1024 --level 0
"""

from __future__ import annotations

import collections
import os
import sys
import types

import torch

import memopt

sys.path.insert(0, os.path.dirname(__file__))
from common import materialize_spec, spec_parser  # noqa: E402


def frame_text(frames: list[dict]) -> str:
    keep = []
    for f in frames:
        name = f.get("filename", "")
        if "torchinductor" in name or "/memopt/" in name or "transformers" in name:
            keep.append(f"{name.rsplit('/', 1)[-1]}:{f.get('line')}:{f.get('name')}")
        if len(keep) == 2:
            break
    if not keep:
        # no Python frame (e.g. the autograd engine's thread): name the C++ callers
        skip = ("c10::", "torch::unwind", "??", "std::", "_start", "__libc")
        cpp = [f.get("name", "") for f in frames if not f.get("name", "??").startswith(skip)]
        py = [f for f in frames if f.get("filename", "").endswith(".py")]
        keep = [n[:60] for n in cpp[:4]]
        if py:
            f = py[0]
            keep.append(f"{f['filename'].rsplit('/', 1)[-1]}:{f.get('line')}:{f.get('name')}")
    return " <- ".join(keep)


def replay(snapshot: dict, base: int) -> tuple[int, list[tuple[int, str]]]:
    """Peak of allocated bytes over the recorded events and the blocks live at it."""
    events = [e for dev in snapshot["device_traces"] for e in dev]
    live: dict[int, tuple[int, str]] = {}
    cur, best, best_live = base, base, {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], frame_text(e.get("frames", [])))
            cur += e["size"]
            if cur > best:
                best, best_live = cur, dict(live)
        elif e["action"] == "free_completed":
            # a block allocated before the recording (``base`` counts it: last step's
            # gradients, freed by this step's zero_grad) goes too
            item = live.pop(e["addr"], None)
            cur -= item[0] if item is not None else e["size"]
    return best, sorted(best_live.values(), reverse=True)


def main() -> None:
    ap = spec_parser(__doc__)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--optimizer", choices=("adamw", "none"), default="adamw")
    ap.add_argument("--plain", action="store_true", help="plain torch.compile instead of memopt")
    ap.add_argument(
        "--pareto",
        choices=("gpt2", "llama"),
        help="build the model and step exactly as benchmarks/pareto.py does (ignores the spec)",
    )
    args = ap.parse_args()
    if args.pareto:
        from common import hf_model
        from pareto import CONFIGS

        name, layers, hidden, batch, seq = CONFIGS[args.pareto]
        model = hf_model(name, layers, hidden)
        ids = torch.randint(0, 32000, (batch, seq), device="cuda")
        built = types.SimpleNamespace(
            model=model, args=(), kwargs={"input_ids": ids, "labels": ids}
        )
    else:
        built = materialize_spec(args, "cuda")
    model = built.model
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    else:
        opt = None
    if args.plain:
        compiled = torch.compile(model)
    else:
        compiled = memopt.optimize(model, level=args.level)

    def step() -> None:
        loss = compiled(*built.args, **built.kwargs).loss
        loss.backward()
        if opt is not None:
            opt.step()
        model.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="all")
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = torch.cuda.max_memory_allocated()
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    print(f"compiled graphs: {graphs}; graph breaks: {dict(counters['graph_break'])}")
    best, blocks = replay(snap, base)
    what = "torch.compile" if args.plain else f"memopt level {args.level}"
    print(f"{args.model} {what}: max_memory_allocated {peak / 2**30:.3f} GiB")
    print(f"allocated before the step {base / 2**30:.3f} GiB; replayed peak {best / 2**30:.3f} GiB")
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for size, where in blocks:
        groups[where].append(size)
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    print(f"live at the peak besides what was allocated before the step, top {args.top}:")
    for where, sizes in rows[: args.top]:
        print(f"  {sum(sizes) / 2**20:10.1f} MiB  x{len(sizes):<3} {where}")


if __name__ == "__main__":
    main()
