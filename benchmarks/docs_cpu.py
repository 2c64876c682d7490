"""The CPU-side numbers of the docs, measured on this machine into docs/data/.

    python benchmarks/docs_cpu.py demo --out docs/data/readme_demo.json   # README's plan table
    python benchmarks/docs_cpu.py cli --out docs/data/cli_timings.json    # docs/cli.md timings
    python benchmarks/docs_cpu.py ci --out docs/data/ci_run.json          # README: suite times

``ci`` clones the committed tree into a temporary folder, makes a fresh venv, runs
``bash .ci/run`` there (install + lint + the whole suite, as CI does), then the quick subset
(``bash tests/run.sh -m "not slow"``) in the same venv, and records wall times and pytest's
summary lines; ``first-hour`` runs README's ``train.py`` block and its ``memopt plan`` command
in a temporary folder. ``demo`` compiles the demo's TinyGPT (``python -m memopt demo``'s model and sizes) at level 0
and keeps its plan table. ``cli`` runs the ``memopt plan`` / ``memopt fit`` commands of
docs/cli.md one after the other, each in its own process, and records wall time, the process's
CPU time (user + sys) and max RSS (GNU ``/usr/bin/time``), its CPU seconds per
phase (the closing line of ``--progress``) and the load average around it. ``python
benchmarks/docs_numbers.py`` then renders the tables; ``--run cpu`` there does both.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIME = "/usr/bin/time"  # GNU time (Debian: apt-get install time)

#: (command, what it traces, label); the label's bracketed fields come from the output.
CLI_COMMANDS = (
    ("memopt plan hf:llama --batch 8 --seq 2048", "2 + 3 of 32 layers", "6.7B"),
    (
        "memopt plan hf:llama --config hidden_size=8192 intermediate_size=28672 "
        "num_hidden_layers=80 num_attention_heads=64 num_key_value_heads=8 --batch 1 --seq 4096",
        "2 + 3 of 80",
        "69B",
    ),
    (
        "memopt plan hf:llama --batch 8 --seq 2048 --budget 70GiB",
        "32 of 32",
        "static shapes, planner; {verdict}",
    ),
    ("memopt plan hf:llama --batch 8 --seq 2048 --depth full", "32 of 32", ""),
    ("memopt fit hf:gpt2 --memory 24GiB", "12 of 12", "12 layers; answers {answers}"),
)


def demo(out: Path) -> None:
    import torch

    import memopt
    from memopt.demo import TinyGPT, _step

    torch.manual_seed(0)
    model = TinyGPT(layers=2)
    ids = torch.randint(0, 512, (8, 128))
    compiled = memopt.optimize(model, level=0)
    _step(model, compiled, ids)
    table = memopt.report(compiled).table().splitlines()
    doc = {
        "command": "python -m memopt demo (level 0 table)",
        "torch": torch.__version__,
        "table": table,
        "table_head": table[:6],
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")


def _verdict(text: str) -> str:
    m = re.search(r"INFEASIBLE.*", text)
    return m.group(0).strip().rstrip(".") if m else "fits"


def _answers(text: str) -> str:
    """The largest batch of each row of ``memopt fit``'s table (``29 / 40 / 45``)."""
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Largest ")), None)
    if start is None:
        return "?"
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in lines[start + 3 :] if ln.strip()]
    return " / ".join(r[1] for r in rows if len(r) > 1)


def cli(out: Path) -> None:
    import torch
    import transformers

    rows = []
    loads: list[float] = []
    for command, traced, label in CLI_COMMANDS:
        loads.append(os.getloadavg()[0])
        usage = ROOT / ".docs_cpu_time.txt"
        t0 = time.perf_counter()
        p = subprocess.run(
            [TIME, "-f", "%U %S %M", "-o", str(usage), sys.executable, "-m", "memopt"]
            + [*command.split()[1:], "--progress"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        user, system, rss = usage.read_text().split()[-3:]
        usage.unlink()
        loads.append(os.getloadavg()[0])
        if p.returncode:
            raise SystemExit(f"{command} failed ({p.returncode}):\n{p.stderr[-2000:]}")
        phases = re.findall(r"CPU time (.*)$", p.stderr, re.M)
        text = p.stdout + p.stderr
        rows.append(
            {
                "command": command,
                "traced": traced,
                "label": label.format(verdict=_verdict(text), answers=_answers(p.stdout)),
                "wall_s": wall,
                "user_s": float(user),
                "sys_s": float(system),
                "max_rss_kib": int(rss),
                "cpu_phases": phases[-1] if phases else "",
                "stdout_tail": p.stdout.splitlines()[-12:],
                # the budget planner's verdict, above a sync dict that wraps over many lines
                "planner_lines": [
                    x for x in p.stdout.splitlines() if x.startswith(("Budget planner", "smallest"))
                ],
            }
        )
        print(f"{wall:6.1f} s  {command}", flush=True)
    doc = {
        "date": datetime.date.today().isoformat(),
        "host": f"{os.cpu_count()}-core {platform.machine()} box ({_cpu_name()})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_min": min(loads),
        "load_max": max(loads),
        "rows": rows,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")


_SUMMARY = re.compile(r"(\d+) passed(?:, (\d+) skipped)?.* in ([\d.]+)s")


def _pytest_summary(text: str) -> dict:
    m = list(_SUMMARY.finditer(text))[-1]
    return {"passed": int(m[1]), "skipped": int(m[2] or 0), "pytest_s": float(m[3])}


def _slowest(text: str, top: int = 40) -> list[str]:
    """pytest's ``--durations`` lines (tests/run.sh asks for them), slowest first."""
    rows = [ln.strip() for ln in text.splitlines() if re.match(r"^\s*[\d.]+s (call|setup) ", ln)]
    return rows[:top]


def _timed(cmd: str, cwd: Path, env: dict | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(
        ["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if p.returncode:  # pytest's report is on stdout, the warnings on stderr
        raise SystemExit(f"{cmd} failed ({p.returncode}):\n{p.stdout[-6000:]}\n{p.stderr[-1500:]}")
    return time.perf_counter() - t0, p.stdout + p.stderr


def ci(out: Path) -> None:
    import tempfile

    commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True)
    with tempfile.TemporaryDirectory() as tmp:
        clone, venv = Path(tmp) / "clone", Path(tmp) / "venv"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {**os.environ, "PATH": f"{venv}/bin:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
        env.pop("PYTHONPATH", None)
        load0 = os.getloadavg()[0]
        full_s, full = _timed("bash .ci/run", clone, env)
        quick_s, quick = _timed('bash tests/run.sh -m "not slow"', clone, env)
        load1 = os.getloadavg()[0]
    doc = {
        "date": datetime.date.today().isoformat(),
        "commit": commit.strip(),
        "host": f"{os.cpu_count()}-core {platform.machine()} box ({_cpu_name()})",
        "load": [load0, load1],
        "ci_run_s": full_s,
        "full": _pytest_summary(full),
        "quick_s": quick_s,
        "quick": _pytest_summary(quick),
        "slowest": _slowest(full),
    }
    doc["install_s"] = full_s - doc["full"]["pytest_s"]  # pip installs and ruff
    out.write_text(json.dumps(doc, indent=1) + "\n")


def first_hour(out: Path) -> None:
    import tempfile

    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- first hour: tests/test_readme.py runs this block -->", 1)[1]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    plan = next(line for line in readme.splitlines() if line.startswith("memopt plan hf:gpt2"))
    plan = plan.split("  #")[0].strip()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "train.py").write_text(code)
        train_s, _ = _timed(f"{sys.executable} train.py", Path(tmp))
        plan_s, _ = _timed(f"{sys.executable} -m memopt {plan.split(' ', 1)[1]}", Path(tmp))
    doc = {
        "date": datetime.date.today().isoformat(),
        "host": f"{os.cpu_count()}-core {platform.machine()} box ({_cpu_name()})",
        "train_s": train_s,
        "plan_command": plan,
        "plan_s": plan_s,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("demo", "cli", "ci", "first-hour"))
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    {"demo": demo, "cli": cli, "ci": ci, "first-hour": first_hour}[a.what](a.out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
