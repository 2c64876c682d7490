"""Docs that stay true: every table of measured numbers in the docs is rendered from docs/data/.

    python benchmarks/docs_numbers.py            # rewrite every generated section from docs/data
    python benchmarks/docs_numbers.py --check    # exit 1 when a doc disagrees with its data (CI)
    python benchmarks/docs_numbers.py --list     # per data file: the command that produces it
    python benchmarks/docs_numbers.py --run cpu  # re-run the CPU producers, then rewrite
    python benchmarks/docs_numbers.py --run gpu  # print the device commands (they cannot run here)

A generated section sits between two markers in a doc (README.md or docs/*.md)::

    <!-- generated: NAME -->
    ...rendered by benchmarks/docs_tables.py: SECTIONS[NAME] from its docs/data files...
    <!-- end generated: NAME -->

``benchmarks/zoo.py``'s own ``<!-- zoo DEVICE -->`` / ``<!-- /zoo DEVICE -->`` markers count as
the section ``zoo_DEVICE`` (rendered by ``zoo.markdown`` from ``docs/data/zoo_DEVICE.json``).
Numbers typed in prose are wrapped in ``<!-- n:KEY -->TEXT<!-- /n -->`` (invisible in
markdown; benchmarks/docs_prose.py computes KEY from docs/data) and checked the same way; a
number with no data file behind it stays plain text, said so near it. To add a table: write its renderer in
docs_tables.py (a function of the loaded JSON that returns markdown), register it in
``SECTIONS``, put empty markers where it goes and run this script. Every file in docs/data must
be matched by a ``PRODUCERS`` entry (benchmarks/docs_producers.py: the command that writes it),
or ``--check`` fails.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import docs_prose  # noqa: E402
from benchmarks.docs_producers import PRODUCERS as FIRST  # noqa: E402
from benchmarks.docs_producers import Producer  # noqa: E402
from benchmarks.docs_producers_more import MORE  # noqa: E402
from benchmarks.docs_tables import SECTIONS, render  # noqa: E402

PRODUCERS = FIRST + MORE  # matched in order

#: ``<!-- generated: NAME -->`` ... ``<!-- end generated: NAME -->``, or zoo.py's markers.
MARKERS = (
    re.compile(
        r"(?P<indent>[ \t]*)(?P<begin><!-- generated: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
        r"(?P<end><!-- end generated: (?P=name) -->)",
        re.S,
    ),
    re.compile(
        r"(?P<indent>)(?P<begin><!-- zoo (?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
        r"(?P<end><!-- /zoo (?P=name) -->)",
        re.S,
    ),
)


def producer_of(name: str) -> Producer | None:
    return next((p for p in PRODUCERS if fnmatch.fnmatch(name, p.pattern)), None)


def data_files() -> list[str]:
    return sorted(p.name for p in DATA.glob("*.json"))


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def rewrite(text: str) -> tuple[str, list[str]]:
    """``text`` with every generated section rendered afresh, and the names found."""
    names: list[str] = []

    def sub(m: re.Match) -> str:
        name = m["name"] if m.re is MARKERS[0] else f"zoo_{m['name']}"
        names.append(name)
        ind = m["indent"]
        body = "".join(ind + line for line in render(name, DATA).splitlines(keepends=True))
        return ind + m["begin"] + body + ind + m["end"]

    for pattern in MARKERS:
        text = pattern.sub(sub, text)
    text, keys = docs_prose.rewrite(text)
    return text, names + [f"n:{k}" for k in keys]


def check(write: bool) -> list[str]:
    """Problems found; with ``write`` the docs are rewritten instead of reported as stale."""
    problems: list[str] = []
    seen: set[str] = set()
    for doc in docs():
        old = doc.read_text()
        try:
            new, names = rewrite(old)
        except KeyError as e:
            problems.append(f"{doc.relative_to(ROOT)}: {e.args[0]}")
            continue
        seen.update(names)
        if new == old:
            continue
        if write:
            doc.write_text(new)
            print(f"rewrote {doc.relative_to(ROOT)}")
        else:
            diff = difflib.unified_diff(
                old.splitlines(), new.splitlines(), "doc", "rendered from docs/data", lineterm=""
            )
            problems.append(
                f"{doc.relative_to(ROOT)} disagrees with docs/data (run python "
                "benchmarks/docs_numbers.py to rewrite it, or fix the data):\n"
                + "\n".join(list(diff)[:40])
            )
    missing = [n for n in SECTIONS if n not in seen and not n.startswith("zoo_")]
    problems += [f"section {n!r} is registered but no doc has its markers" for n in missing]
    problems += [
        f"docs/data/{f}: no producer; add a Producer(pattern, command, device) to "
        "benchmarks/docs_numbers.py PRODUCERS"
        for f in data_files()
        if producer_of(f) is None
    ]
    return problems


def list_producers() -> None:
    for f in data_files():
        p = producer_of(f)
        cmd = p.command.format(file=f) if p else "UNKNOWN"
        note = f"  ({p.note})" if p and p.note else ""
        print(f"{f}\n    [{p.device if p else '?'}] {cmd}{note}")


def run(device: str, only: set[str]) -> int:
    files = [
        f
        for f in data_files() + [p.pattern for p in PRODUCERS if "*" not in p.pattern]
        if (p := producer_of(f)) and p.device == device and (not only or f in only)
    ]
    done: set[str] = set()
    for f in dict.fromkeys(files):
        cmd = producer_of(f).command.format(file=f)
        if device != "cpu":
            print(cmd)
            continue
        if cmd in done:
            continue
        done.add(cmd)
        print(f"$ {cmd}", flush=True)
        rc = subprocess.call(shlex.split(cmd), cwd=ROOT)
        if rc:
            print(f"failed ({rc}): {cmd}", file=sys.stderr)
            return rc
    if device != "cpu":
        print(
            "# on the device: memopt from a copy of the tree with passes/ at memopt/passes "
            "(docs/benchmarks.md); then copy the JSON into docs/data and run this script"
        )
        return 0
    return 1 if check(write=True) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="fail when a doc disagrees with its data")
    g.add_argument("--list", action="store_true", help="each data file and its producer")
    g.add_argument(
        "--run", choices=("cpu", "gpu", "gpu-x2"), help="re-run (cpu) or print (gpu) producers"
    )
    p.add_argument("--only", default="", help="with --run: these data files (comma-separated)")
    a = p.parse_args(argv)
    if a.list:
        list_producers()
        return 0
    if a.run:
        return run(a.run, {f for f in a.only.split(",") if f})
    problems = check(write=not a.check)
    for line in problems:
        print(line, file=sys.stderr)
    if not problems and a.check:
        n = sum(len(docs_prose.MARKER.findall(d.read_text())) for d in docs())
        print(f"docs agree with docs/data ({len(SECTIONS)} generated sections, {n} prose numbers)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
