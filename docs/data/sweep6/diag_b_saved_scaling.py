"""python diag_b_saved_scaling.py NAME... : `memopt plan sweep6_models:NAME --json` at --batch 2
and 3; the step's saved-activation formula (all regions) at each and whether the batch-2
formula gives the batch-3 trace's bytes at batch 3."""
import json, os, subprocess, sys
import sympy

here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
for name in sys.argv[1:]:
    s = {}
    for b in (2, 3):
        p = subprocess.run([sys.executable, "-m", "memopt", "plan", f"sweep6_models:{name}",
                            "--batch", str(b), "--device-kind", "cpu", "--json"], cwd=here,
                           env=env, capture_output=True, text=True)
        rep = json.loads(p.stdout[p.stdout.find("{"):])
        s[b] = (rep["peak"]["saved_activations_symbolic"], rep["peak"]["saved_activations_bytes"])
    at3 = int(sympy.sympify(s[2][0]).subs(sympy.Symbol("batch"), 3))
    print(f"{name}: batch 2 {s[2][0]} ; batch 3 {s[3][0]} ; batch-2 formula at 3 {at3:,} vs "
          f"{s[3][1]:,}: {'scales' if at3 == s[3][1] else f'off by {s[3][1] - at3:,} B'}", flush=True)
