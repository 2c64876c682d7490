"""What a step saved for backward, storage by storage: per zoo model (tiny, fp32), the
storages saved-tensor hooks see under memopt at level 0, counted by (dtype, bytes) with a
shape each, beside the report's level-0 estimate. Where the zoo's ``exact`` column says
no on one device and yes on another, the difference of the two listings names the tensors
the estimate misses::

    python benchmarks/diag_saved_tensors.py --models vit,deit --device cuda --out cuda.txt
    python benchmarks/diag_saved_tensors.py --models vit,deit --out cpu.txt
    diff cpu.txt cuda.txt
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def one(name: str, device: str) -> str:
    import torch

    import memopt
    from benchmarks.zoo import BY_NAME, _compiled, build, one_step
    from memopt import _torch_compat as compat

    with compat.no_compile_caches():
        model, inputs = build(BY_NAME[name], "tiny", device, torch.float32)
        opt = _compiled(model, level=0)
        _, _, saved = one_step(model, opt, inputs)
    rep = memopt.report(opt)
    count: collections.Counter = collections.Counter()
    shapes: dict = {}
    for t in saved.tensors:
        if t.compiled:
            key = (str(t.dtype).removeprefix("torch."), t.nbytes)
            count[key] += 1
            shapes.setdefault(key, t.shape)
    runs = [rep.runs(r) for r in rep.regions]
    lines = [
        f"== {name}: measured {saved.compiled:,} B, predicted {rep.saved_bytes()[0]:,} B; "
        f"{len(rep.regions)} region(s) run {runs}"
    ]
    for key in sorted(count, key=lambda k: (-k[1], k[0])):
        lines.append(f"  {key[0]} {key[1]:,} B x{count[key]} (e.g. {shapes[key]})")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    text = "\n".join(one(m, a.device) for m in a.models.split(",") if m)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
