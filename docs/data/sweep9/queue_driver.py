"""python queue_driver.py : takes lines off queue.txt one at a time (a model name: driver.py's
three steps; 'cmd: SHELL': that command, output to logs/cmd_N.txt), so that everything runs
one at a time."""
import os, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
q = os.path.join(here, "queue.txt")
n = 0
while True:
    lines = [l for l in open(q).read().splitlines() if l.strip()] if os.path.exists(q) else []
    if not lines:
        time.sleep(5); continue
    job, rest = lines[0], lines[1:]
    open(q, "w").write("\n".join(rest) + ("\n" if rest else ""))
    if job == "STOP":
        break
    print(time.strftime("%H:%M:%S"), "start", job, flush=True)
    if job.startswith("cmd:"):
        n += 1
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR="/tmp/ind_sweep9")
        p = subprocess.run(["timeout", "420", "bash", "-c", job[4:]], cwd=here, env=env,
                           capture_output=True, text=True)
        open(os.path.join(here, "logs", f"cmd_{n}.txt"), "w").write(job + "\n" + p.stdout + "\n--- stderr ---\n" + p.stderr)
    else:
        subprocess.run([sys.executable, "driver.py", job], cwd=here)
    print(time.strftime("%H:%M:%S"), "end", job, flush=True)
