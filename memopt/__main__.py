"""Command line: ``python -m memopt demo|plan|fit`` (also the ``memopt`` console script)."""

from __future__ import annotations

import sys

HELP = """usage: memopt COMMAND [options]   (memopt COMMAND --help for each command's options)

commands:
  demo   train a small GPT on the CPU at level 0 and level 1: the plan table and the
         measured saving
  plan   trace a model (hf:gpt2, hf:llama, a config file, ...) without a GPU and print its
         plan table, predicted peak and, with --budget, the planner's plan
  fit    the largest batch or sequence that fits a memory size, with and without memopt
  show   print a saved report (memopt plan --save-report, or report.to_dict() as JSON)
  plot   draw a step's memory timeline, a CUDA memory snapshot or the benchmarks' Pareto
         front (pip install memopt[plot])

options:
  -h, --help     this text
  -V, --version  memopt's version"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = (
        "usage: memopt {demo,plan,fit,show,plot} [options]   (memopt COMMAND --help for options)"
    )
    if not argv or argv[0] in ("-h", "--help"):
        print(usage if not argv else HELP)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from memopt._version import __version__

        print(f"memopt {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        from memopt.demo import main as demo

        return demo(rest)
    if cmd in ("plan", "fit", "show", "plot"):
        from memopt.cli.main import main as cli

        return cli([cmd, *rest])
    print(f"memopt: unknown command {cmd!r}\n{usage}", file=sys.stderr)
    return 2


def console() -> int:
    """The ``memopt`` console script: :func:`main`, quiet when its output is piped into a
    command that stops reading (``memopt show report.json --frozen | head``)."""
    import os

    try:
        return main()
    except BrokenPipeError:
        # no more output can go anywhere; point stdout at devnull so the interpreter's own
        # flush at exit does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(console())
