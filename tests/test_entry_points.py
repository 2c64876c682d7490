"""What a fresh process sees: the dynamo backend entry point and the command line."""

import subprocess
import sys

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_backend_by_name_without_importing_memopt():
    pytest.importorskip("importlib.metadata")
    r = _run(
        "import sys, torch\n"
        "m = torch.compile(torch.nn.Linear(4, 4), backend='memopt')\n"
        "m(torch.randn(2, 4)).sum().backward()\n"
        "print('memopt' in sys.modules)\n"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("True")  # torch found memopt through its entry point


def test_version_and_help():
    from memopt._version import __version__

    r = _run("from memopt.__main__ import main; raise SystemExit(main(['--version']))")
    assert (r.returncode, r.stdout.strip()) == (0, f"memopt {__version__}")
    r = _run("from memopt.__main__ import main; raise SystemExit(main(['--help']))")
    assert r.returncode == 0
    assert all(f"  {cmd}  " in r.stdout for cmd in ("demo", "plan", "fit"))
