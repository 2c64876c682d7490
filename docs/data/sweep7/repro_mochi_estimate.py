"""Mochi (sweep7_models.mochi: MochiTransformer3DModel, 2 blocks, hidden 32, batch 2, with
`encoder_attention_mask`: 20 compiled runs per step across `nonzero` graph breaks): memopt's
level-0 estimate of the saved activation bytes is 8,192 B below what memopt's own level-0
run saves (check_model: predicted 328,200, torch.compile and memopt level 0 both measure
336,392; level 1: 168,512 vs 176,704; budget 0.5: 219,328 vs 239,808).

    python repro_mochi_estimate.py      (from docs/data/sweep7, venv on; ~40 s)
"""
import os, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.abspath(os.path.join(here, "../../..")))
import torch

torch.set_num_threads(1)
import memopt
from memopt import _torch_compat as compat
from benchmarks.zoo import build, one_step, _compiled
from sweep7_models import NEW

with compat.no_compile_caches():
    model, inputs = build(NEW["mochi"], "tiny", "cpu", torch.float32)
    opt = _compiled(model, level=0)
    _, _, saved = one_step(model, opt, inputs)
predicted = memopt.report(opt).saved_bytes()[0]
print(f"memopt level 0: predicted {predicted} B, measured {saved.compiled} B "
      f"(difference {saved.compiled - predicted} B)")
assert predicted == saved.compiled, "BUG: the level-0 estimate is not exact"
