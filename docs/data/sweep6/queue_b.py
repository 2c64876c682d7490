"""python queue_b.py : sweep 6b's queue: takes lines off queue_b.txt one at a time (a model
name: driver_b.py's four steps; 'cmd: SHELL': that command under nice -n 5 and timeout 300,
output to logs/b_cmd_N.txt), so that everything runs one at a time; launches nothing at or
after 09:05 UTC (it logs what it skipped)."""
import os, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
q = os.path.join(here, "queue_b.txt")
n = 0
while True:
    lines = [l for l in open(q).read().splitlines() if l.strip()] if os.path.exists(q) else []
    if not lines:
        time.sleep(3); continue
    job, rest = lines[0], lines[1:]
    open(q, "w").write("\n".join(rest) + ("\n" if rest else ""))
    if job == "STOP":
        break
    if time.strftime("%H:%M", time.gmtime()) >= "09:05":
        print(time.strftime("%H:%M:%S", time.gmtime()), "cutoff, not run:", job, flush=True)
        continue
    print(time.strftime("%H:%M:%S", time.gmtime()), "start", job, flush=True)
    if job.startswith("cmd:"):
        n += 1
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR="/tmp/ind_sweep6b")
        t = time.time()
        p = subprocess.run(["nice", "-n", "5", "timeout", "300", "bash", "-c", job[4:]], cwd=here,
                           env=env, capture_output=True, text=True)
        open(os.path.join(here, "logs", f"b_cmd_{n}.txt"), "w").write(
            job + f"\nrc={p.returncode} seconds={time.time() - t:.1f}\n" + p.stdout
            + "\n--- stderr ---\n" + p.stderr)
    else:
        subprocess.run([sys.executable, "driver_b.py", job], cwd=here)
    print(time.strftime("%H:%M:%S", time.gmtime()), "end", job, flush=True)
