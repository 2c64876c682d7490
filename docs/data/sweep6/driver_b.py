"""python driver_b.py NAME... : sweep 6b. As driver.py (check, offvc with offload_min_bytes=0,
`memopt plan --batch 2`) plus `memopt plan --batch 3`; each step under `timeout 300` and
`nice -n 5`, TORCHINDUCTOR_CACHE_DIR=/tmp/ind_sweep6b; merges into results_b.json; logs in
logs/NAME_{check,offvc,plan,plan3}.txt. One model at a time."""
import json, os, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "../../.."))
env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR="/tmp/ind_sweep6b",
           PYTHONPATH=here + ":" + root)
os.makedirs(os.path.join(here, "logs"), exist_ok=True)
path = os.path.join(here, "results_b.json")


CUTOFF = os.environ.get("SWEEP_CUTOFF_UTC", "09:05")  # launch no step at or after this time


def run(cmd, log):
    t = time.time()
    if time.strftime("%H:%M", time.gmtime()) >= CUTOFF:
        return None, {"skipped": f"not run: past the {CUTOFF} UTC cutoff"}, 0.0, "", ""
    p = subprocess.run(["nice", "-n", "5", "timeout", "300", *cmd], cwd=here, env=env,
                       capture_output=True, text=True)
    open(os.path.join(here, "logs", log), "w").write(p.stdout + "\n--- stderr ---\n" + p.stderr)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    return p.returncode, res, round(time.time() - t, 1), p.stdout, p.stderr


def save(name, row):
    results = json.load(open(path)) if os.path.exists(path) else {}
    results[name] = row
    json.dump(results, open(path, "w"), indent=1, default=str)


for name in sys.argv[1:]:
    row = {"started": time.strftime("%H:%M:%S", time.gmtime())}
    rc, res, s, _, err = run([sys.executable, "run_one.py", name, "check"], f"{name}_check.txt")
    row["check"] = res or {"rc": rc, "stderr_tail": err[-1500:]}
    row["check_seconds"] = s
    row["class"] = (res or {}).get("class")
    save(name, row)
    rc, res, s, _, err = run([sys.executable, "offvc.py", name], f"{name}_offvc.txt")
    row["offload"] = res or {"rc": rc, "stderr_tail": err[-1500:]}
    row["offload_seconds"] = s
    save(name, row)
    for b, key in ((2, "plan"), (3, "plan3")):
        rc, _, s, out, err = run([sys.executable, "-m", "memopt", "plan", f"sweep6_models:{name}",
                                  "--batch", str(b), "--device-kind", "cpu"], f"{name}_{key}.txt")
        row[key] = {"rc": rc, "stdout_tail": out[-2500:], "stderr_tail": err[-1500:]}
        row[key + "_seconds"] = s
    row["seconds"] = round(row["check_seconds"] + row["offload_seconds"] + row["plan_seconds"]
                           + row["plan3_seconds"], 1)
    row["ended"] = time.strftime("%H:%M:%S", time.gmtime())
    save(name, row)
    print(time.strftime("%H:%M:%S", time.gmtime()), name, "done", row["seconds"], flush=True)
