"""The dynamo backend entry point as a fresh process sees it, and the command line's version
and help."""

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


def test_version_and_help(capsys):
    # in this process: main() only prints (memopt.__main__ imports nothing but sys for these);
    # a fresh process running it is tests/test_cli_errors.py::test_console_entry_point_exit_code
    from memopt.__main__ import main
    from memopt._version import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"memopt {__version__}"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {cmd}  " in out for cmd in ("demo", "plan", "fit"))
