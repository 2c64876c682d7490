"""memopt's saved bytes, graph-level (``Report.saved_bytes``) and as Inductor compiled them
(``Report.compiled_saved_bytes``), against the saved tensors measured (saved-tensor hooks), per
zoo model at its tiny size, levels 0 and 1 (docs/zoo.md, sixty-first session)::

    python benchmarks/diag_compiled_saved.py OUT.json llama,bert,vit [float32]   # DEV=cpu: on CPU

On CUDA the compiled count is not given by the report (a shortfall not explained yet): this
script read it there from the code before that (commit d28b8b1 plus the count's commit).
"""

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402

import memopt  # noqa: E402
from benchmarks import zoo  # noqa: E402
from benchmarks.zoo_models import BY_NAME  # noqa: E402
from memopt import _torch_compat as compat  # noqa: E402

out, names = sys.argv[1], sys.argv[2].split(",")
dtype = getattr(torch, sys.argv[3]) if len(sys.argv) > 3 else torch.float32
rows = []
for name in names:
    t0 = time.time()
    try:
        with compat.no_compile_caches():
            model, inputs = zoo.build(BY_NAME[name], "tiny", os.environ.get("DEV", "cuda"), dtype)
            for level in (0, 1):
                opt = zoo._compiled(model, level=level)
                _, _, m = zoo.one_step(model, opt, inputs)
                rep = memopt.report(opt)
                row = {
                    "model": name,
                    "level": level,
                    "dtype": str(dtype),
                    "fx": rep.saved_bytes()[1],
                    "compiled": rep.compiled_saved_bytes(),
                    "measured": m.compiled,
                    "eager": m.eager,
                    "regions": len(rep.regions),
                    "s": round(time.time() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    except Exception as e:  # noqa: BLE001 - one model's failure is its row
        rows.append({"model": name, "error": repr(e)[:300]})
        print(rows[-1], flush=True)
json.dump(
    {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "rows": rows,
    },
    open(out, "w"),
    indent=1,
)
