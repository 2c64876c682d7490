"""memopt plan --batch 2 gives wrong batch formulas for ALBERT (and LeViT): traced at batch 2,
the formulas say `activations = 115712*batch + 728068` and `inputs = 2048` (constant), while
--batch 4 gives `479488*batch + 516` and `1024*batch` -- and torch.compile's measured saved
bytes are 959,492 B at batch 2 and 1,918,468 B at batch 4 (= 479488*batch + 516 exactly). The
batch-2 formula, evaluated at batch 4, predicts 1,190,916 B: 38% short. Both are right at their
own batch; the batch-2 one does not scale.

    python repro_plan_batch2.py      (from docs/data/sweep6, venv on; ~1 min)
"""
import os, re, subprocess, sys

import sympy

here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))


def formula(batch, model="albert"):
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", f"sweep6_models:{model}",
                        "--batch", str(batch), "--device-kind", "cpu"], cwd=here, env=env,
                       capture_output=True, text=True)
    acts = re.search(r"^\s+activations\s+.*?= (.*?)\s{2,}", p.stdout, re.M).group(1)
    inputs = re.search(r"^\s+inputs\s+.*?= (.*?)\s{2,}", p.stdout, re.M).group(1)
    return sympy.sympify(acts), sympy.sympify(inputs)


b = sympy.Symbol("batch")
a2, i2 = formula(2)
a4, i4 = formula(4)
print(f"--batch 2: activations {a2}, inputs {i2}")
print(f"--batch 4: activations {a4}, inputs {i4}")
print(f"batch-2 formulas at batch 4: activations {a2.subs(b, 4)}, inputs {i2.subs(b, 4)}; "
      f"batch-4 trace: {a4.subs(b, 4)}, {i4.subs(b, 4)}")
assert a2.subs(b, 4) == a4.subs(b, 4) and i2.subs(b, 4) == i4.subs(b, 4), \
    "BUG: the --batch 2 trace's formulas do not scale with batch"
