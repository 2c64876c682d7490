"""When does autograd free a compiled region's tangents? (issue 16's Qwen2 prediction gap)

Two compiled regions ``f2(f1(x))`` on the device: ``f1`` returns a hidden state (its tangent is
the real gradient that ``f2``'s backward sends), ``f2`` returns ``{"loss", "logits"}`` and the
step reads only the loss (the zero gradient autograd makes for the logits is ``f2``'s tangent),
as an HF causal LM does. Each tangent has a size no other tensor has. The allocator's history
(CUDA) or the profiler's memory events (CPU) of one step say whether each tangent is freed
before its backward ends or when it returns. One JSON line::

    python benchmarks/diag_tangents.py --device cuda
"""

from __future__ import annotations

import argparse
import json

import torch


def _who(frames: list[dict]) -> str:
    """``zeros`` for autograd's zero gradient (PyNode::to_py_args), else the Python line."""
    names = [f.get("name", "") for f in frames]
    if any("VariableInfo::zeros" in n for n in names):
        return "zeros"
    py = [f for f in frames if f.get("filename", "").endswith(".py")]
    return f"{py[0]['filename'].rsplit('/', 1)[-1]}:{py[0].get('line')}" if py else "C++"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--memopt", action="store_true", help="memopt.optimize, not torch.compile")
    a = ap.parse_args()
    dev = a.device
    torch.manual_seed(0)
    H, V, T = 320, 6144, 1024  # hidden bytes T*H*4, logits bytes T*V*4: unique sizes
    l1 = torch.nn.Sequential(*[torch.nn.Linear(H, H) for _ in range(3)]).to(dev)
    head = torch.nn.Linear(H, V).to(dev)
    l2 = torch.nn.Sequential(*[torch.nn.Linear(H, H) for _ in range(3)]).to(dev)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l2, self.head = l2, head

        def forward(self, h):
            logits = self.head(self.l2(h).relu())
            return {"loss": logits.logsumexp(-1).mean(), "logits": logits}

    if a.memopt:
        import memopt

        f1, f2 = (
            memopt.optimize(m, level=0) for m in (torch.nn.Sequential(l1, torch.nn.ReLU()), Head())
        )
    else:
        f1, f2 = torch.compile(torch.nn.Sequential(l1, torch.nn.ReLU())), torch.compile(Head())

    x = torch.randn(T, H, device=dev)

    marks = []

    def step():
        h = f1(x)
        # runs when f2's backward has returned (h's gradient is ready), before f1's
        h.register_hook(
            lambda g: marks.append(torch.empty(6_000_000, dtype=torch.uint8, device=dev))
        )
        f2(h)["loss"].backward()
        marks.clear()

    step()
    step()
    sizes = {"hidden_tangent": T * H * 4, "logits_tangent": T * V * 4}
    out = {"device": dev, "torch": torch.__version__, "memopt": a.memopt}
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks="all")
        step()
        marker = torch.empty(5_000_000, dtype=torch.uint8, device=dev)  # after the backward
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        ev = [e for d in snap["device_traces"] for e in d]
        end = next(
            i for i, e in enumerate(ev) if e["action"] == "alloc" and 5e6 <= e["size"] < 5.1e6
        )
        del marker
        f2_end = next(
            i for i, e in enumerate(ev) if e["action"] == "alloc" and 6e6 <= e["size"] < 6.1e6
        )
        out["f2_backward_end_index"], out["backward_end_index"] = f2_end, end
        for name, size in sizes.items():
            out[name] = [
                (i, e["action"], _who(e.get("frames", [])))
                for i, e in enumerate(ev)
                if e["size"] == size and e["action"] != "free_completed"
            ]
    else:
        import torch.profiler as tp

        with tp.profile(activities=[tp.ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
        evs = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
        t0 = evs[0].start_ns()
        for name, size in sizes.items():
            out[name] = [
                [(e.start_ns() - t0) // 1000, e.nbytes()]
                for e in evs
                if e.name() == "[memory]" and abs(e.nbytes()) == size
            ]
        out["backward_nodes_us"] = [
            [e.name()[-40:], (e.start_ns() - t0) // 1000, (e.end_ns() - t0) // 1000]
            for e in evs
            if e.name().startswith("autograd::engine::evaluate_function: Compiled")
        ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
