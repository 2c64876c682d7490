"""python diag_b_wavlm_rows.py : `memopt plan sweep6_models:wavlm --batch 2 --json`: the report's
saved bytes (all regions: what check_model measures, 8,121,008 B) against the peak model's
saved activations and its inputs / gradients rows, and each region's baseline saved bytes."""
import json, os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
p = subprocess.run([sys.executable, "-m", "memopt", "plan", "sweep6_models:wavlm", "--batch", "2",
                    "--device-kind", "cpu", "--json"], cwd=here, env=env, capture_output=True, text=True)
rep = json.loads(p.stdout[p.stdout.find("{"):])
print("report saved_bytes_before:", rep["report"]["saved_bytes_before"])
print("peak saved_activations:", rep["peak"]["saved_activations_symbolic"], "=", rep["peak"]["saved_activations_bytes"])
for k, v in rep["peak"]["components"].items():
    print(f"  {k:18s} {v['bytes']:>12,} = {v['symbolic']}")
for r in rep["report"]["regions"]:
    print("region", r.get("index"), "baseline saved", r.get("baseline_saved_symbolic"), "=", r.get("baseline_saved_bytes"),
          "saved inputs:", [(s.get("symbolic"), s.get("bytes")) for s in r.get("extra", {}).get("saved_inputs", [])])
