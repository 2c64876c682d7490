"""Command line: ``python -m memopt demo|plan|fit`` (also the ``memopt`` console script)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: memopt {demo,plan,fit} [options]   (memopt COMMAND --help for options)"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        from memopt.demo import main as demo

        return demo(rest)
    if cmd in ("plan", "fit"):
        from memopt.cli.main import main as cli

        return cli([cmd, *rest])
    print(f"memopt: unknown command {cmd!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
