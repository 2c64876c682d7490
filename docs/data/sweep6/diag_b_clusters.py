"""python diag_b_clusters.py NAME : `memopt plan sweep6_models:NAME --json` at --batch 2 and 3;
prints the plan rows (cluster id, freq, symbolic saving) that differ between the two."""
import json, os, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
name = sys.argv[1]


def clusters(o, out):
    if isinstance(o, dict):
        if "cluster_id" in o and "saving_symbolic" in o:
            out.append(o)
        for v in o.values():
            clusters(v, out)
    elif isinstance(o, list):
        for v in o:
            clusters(v, out)
    return out


got = {}
for b in (2, 3):
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", f"sweep6_models:{name}", "--batch",
                        str(b), "--device-kind", "cpu", "--json"], cwd=here, env=env,
                       capture_output=True, text=True)
    rep = json.loads(p.stdout[p.stdout.find("{"):])
    got[b] = {c["cluster_id"]: (c["freq"], c["saving_symbolic"], c.get("strategy"), c.get("available"))
              for c in clusters(rep, [])}
for cid in sorted(set(got[2]) | set(got[3])):
    a, b = got[2].get(cid), got[3].get(cid)
    if a != b:
        print(f"{cid}\n   batch 2: {a}\n   batch 3: {b}")
