"""python driver.py NAME... : check, offvc (offload_min_bytes=0) and `memopt plan` per model,
one at a time, each under `timeout 240`; merges into results.json; logs in logs/."""
import json, os, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "../../.."))
env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR="/tmp/ind_sweep6",
           PYTHONPATH=here + ":" + root)
os.makedirs(os.path.join(here, "logs"), exist_ok=True)
path = os.path.join(here, "results.json")


def run(cmd, log):
    t = time.time()
    p = subprocess.run(["timeout", "240", *cmd], cwd=here, env=env, capture_output=True, text=True)
    open(os.path.join(here, "logs", log), "w").write(p.stdout + "\n--- stderr ---\n" + p.stderr)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    return p.returncode, res, round(time.time() - t, 1), p.stdout, p.stderr


for name in sys.argv[1:]:
    results = json.load(open(path)) if os.path.exists(path) else {}
    row = results.get(name, {})
    rc, res, s, _, err = run([sys.executable, "run_one.py", name, "check"], f"{name}_check.txt")
    row["check"] = res or {"rc": rc, "stderr_tail": err[-1500:]}
    row["check_seconds"] = s
    row["class"] = (res or {}).get("class")
    rc, res, s, _, err = run([sys.executable, "offvc.py", name], f"{name}_offvc.txt")
    row["offload"] = res or {"rc": rc, "stderr_tail": err[-1500:]}
    row["offload_seconds"] = s
    rc, _, s, out, err = run([sys.executable, "-m", "memopt", "plan", f"sweep6_models:{name}",
                              "--batch", "2", "--device-kind", "cpu"], f"{name}_plan.txt")
    row["plan"] = {"rc": rc, "stdout_tail": out[-2500:], "stderr_tail": err[-1500:]}
    row["plan_seconds"] = s
    row["seconds"] = round(row["check_seconds"] + row["offload_seconds"] + s, 1)
    results = json.load(open(path)) if os.path.exists(path) else {}
    results[name] = row
    json.dump(results, open(path, "w"), indent=1, default=str)
    print(name, "done", row["seconds"], flush=True)
