"""Where does a reload's host tensor come from? For each reload of one training step of a zoo
model with ``offload_layers=k``: its shape, strides, whether it is pinned and whether it is
one of memopt's pooled host buffers (a host tensor Inductor copied on the CPU is neither).

    python benchmarks/diag_reload_source.py --model vit --k 1 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit")
    p.add_argument("--k", type=int, default=1)
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="gpu")
    a = p.parse_args()

    import memopt
    from benchmarks.zoo import build
    from benchmarks.zoo_models import BY_NAME, step_loss
    from memopt.offload import ops

    seen = []
    inner = ops._reload

    def reload(host, device, after=None):
        seen.append(
            {
                "shape": list(host.shape),
                "stride": list(host.stride()),
                "pinned": bool(host.is_pinned()) if torch.cuda.is_available() else None,
                "pooled": ops.POOL.owns(host),
                "contiguous": host.is_contiguous(),
                "MB": host.numel() * host.element_size() / 1e6,
            }
        )
        return inner(host, device, after)

    ops._LIB.impl("reload", reload, "CompositeExplicitAutograd", allow_override=True)
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    model, inputs = build(BY_NAME[a.model], a.size, a.device, dtype)
    compiled = memopt.optimize(model, offload_layers=a.k)
    step_loss(compiled(**inputs)).backward()
    for s in seen:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
