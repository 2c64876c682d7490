"""memopt plan: EfficientNet's saved-activation formula from a --batch 2 trace does not hold at
batch 3. `memopt plan sweep6_models:efficientnet --batch 2` says 1127965*batch + 8608
(3,392,503 B at batch 3); --batch 3 says 1127965*batch + 18336 (3,402,231 B), which is what
torch.compile saves at batch 3 (diag_b_measure.py efficientnet 3: 3,402,231 B). Inductor's
min-cut partition, which memopt's trace runs with the batch symbol's hint, saves 12 more
per-channel batch-norm statistics (var_mean / rsqrt of 192, 288 and 320 channels and two
squeezed BN means) at batch 3 than at batch 2 (diag_b_saved_diff.py efficientnet): a
constant the batch-2 formula cannot carry.

    python repro_b_batch_cut.py      (from docs/data/sweep6, venv on; ~1 min)
"""
import json, os, subprocess, sys

import sympy

here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
saved = {}
for b in (2, 3):
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "sweep6_models:efficientnet",
                        "--batch", str(b), "--device-kind", "cpu", "--json"], cwd=here, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads(p.stdout[p.stdout.find("{"):])
    saved[b] = (rep["peak"]["saved_activations_symbolic"], rep["peak"]["saved_activations_bytes"])
    print(f"--batch {b}: saved = {saved[b][0]} = {saved[b][1]:,} B")
at3 = int(sympy.sympify(saved[2][0]).subs(sympy.Symbol("batch"), 3))
print(f"the --batch 2 formula at batch 3: {at3:,} B; the --batch 3 trace: {saved[3][1]:,} B")
assert at3 == saved[3][1], (f"BUG: the batch-2 formula is {saved[3][1] - at3:,} B off at batch 3 "
                            "(a partition decided at the traced batch)")
