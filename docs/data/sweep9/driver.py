"""python driver.py NAME... : check, offvc (offload_min_bytes=0) and `memopt plan` at --batch 2
and 3 per model, one at a time, each under `nice -n 10 timeout 420`; no step starts at or after
00:13 UTC; merges into results.json; logs in logs/. memopt is the venv's (the work tree, editable
install); PYTHONPATH carries only this folder (for sweep9_models)."""
import json, os, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "../../.."))
env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR="/tmp/ind_sweep9",
           PYTHONPATH=here)
os.makedirs(os.path.join(here, "logs"), exist_ok=True)
path = os.path.join(here, "results.json")

plan_env = env
# no step starts at or after 00:13 UTC on 2026-12-08 (hard stop 00:25)
import calendar
CUTOFF = calendar.timegm((2026, 12, 8, 0, 13, 0))


def run(cmd, log, env=env):
    t = time.time()
    if time.time() >= CUTOFF:
        return None, {"skipped": "00:13 UTC cut-off"}, 0.0, "", ""
    p = subprocess.run(["timeout", "420", *cmd], cwd=here, env=env, capture_output=True, text=True)
    open(os.path.join(here, "logs", log), "w").write(p.stdout + "\n--- stderr ---\n" + p.stderr)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    return p.returncode, res, round(time.time() - t, 1), p.stdout, p.stderr


for name in sys.argv[1:]:
    results = json.load(open(path)) if os.path.exists(path) else {}
    row = results.get(name, {})
    rc, res, s, _, err = run(["nice", "-n", "10", sys.executable, "run_one.py", name, "check"], f"{name}_check.txt")
    row["check"] = res or {"rc": rc, "stderr_tail": err[-1500:]}
    row["check_seconds"] = s
    row["class"] = (res or {}).get("class")
    rc, res, s, _, err = run(["nice", "-n", "10", sys.executable, "offvc.py", name], f"{name}_offvc.txt")
    row["offload"] = res or {"rc": rc, "stderr_tail": err[-1500:]}
    row["offload_seconds"] = s
    ps = 0
    for bt in ("2", "3"):
        rc, _, s, out, err = run(["nice", "-n", "10", sys.executable, "-m", "memopt", "plan", f"sweep9_models:{name}",
                                  "--batch", bt, "--device-kind", "cpu"], f"{name}_plan_b{bt}.txt", plan_env)
        row["plan" if bt == "2" else "plan_b3"] = {"rc": rc, "stdout_tail": out[-2500:], "stderr_tail": err[-1500:]}
        ps += s
    row["plan_seconds"] = round(ps, 1)
    s = ps
    row["seconds"] = round(row["check_seconds"] + row["offload_seconds"] + s, 1)
    results = json.load(open(path)) if os.path.exists(path) else {}
    results[name] = row
    json.dump(results, open(path, "w"), indent=1, default=str)
    print(name, "done", row["seconds"], flush=True)
