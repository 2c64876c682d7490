"""``memopt plan`` and ``memopt fit``: argument parsing, output, errors -> exit codes.

Exit codes: 0 done, 2 bad arguments or plan strings, 3 the model could not be built (unknown
type, bad factory path, a factory that raised), 4 the model could not be traced. Errors are
one line on stderr; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence

import torch

from memopt.cli import models, progress
from memopt.cli.analyze import FIT_FULL_DEPTH_UP_TO, Analysis, Request, analyze
from memopt.cli.errors import EXIT_OK, EXIT_TRACE, EXIT_USAGE, CliError, one_line
from memopt.cli.fit import FitRow, fit_model, fit_planner
from memopt.cli.peak import OPTIMIZERS
from memopt.config import parse_budget, resolve_config
from memopt.errors import ConfigError, PlanError
from memopt.symbolic import fmt_bytes

_MODEL = re.compile(r"hf:\S+|[A-Za-z_][\w.]*:[A-Za-z_]\w*")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEFAULT_SEQ = 2048
DEFAULT_BATCH = 8


class _Parser(argparse.ArgumentParser):
    """argparse that says what to do when an option swallowed MODEL (``--config`` takes
    every word after it, so ``plan --config n_layer=2 hf:gpt2`` has no MODEL)."""

    argv: Sequence[str] = ()

    def error(self, message: str):  # type: ignore[override]
        hint = _model_hint(self.prog, self.argv) if "model" in message else None
        self.print_usage(sys.stderr)
        text = f"{self.prog}: error: {message}"
        self.exit(EXIT_USAGE, text + (f"; {hint}" if hint else "") + "\n")


def _model_hint(prog: str, argv: Sequence[str]) -> str | None:
    """``put MODEL before --config: memopt plan hf:gpt2 --config ...`` when MODEL came after
    an option."""
    for i, word in enumerate(argv):
        if _MODEL.fullmatch(word) and word.count(":") == 1:
            options = [w for w in argv[:i] if w.startswith("--")]
            if not options:
                return None
            rest = " ".join(w for w in argv if w != word)
            return (
                f"put MODEL before {options[-1]} ({options[-1]} takes the words after it): "
                f"{prog} {word} {rest}"
            )
    return None


def _add_save_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--save",
        metavar="PLAN.json",
        help="write the plan file ({config, sync}) that re-applies this plan without planning "
        "(MEMOPT_CONFIG=PLAN.json or memopt.optimize(model, config='PLAN.json'))",
    )
    p.add_argument(
        "--save-report",
        metavar="REPORT.json",
        help="write the report as JSON (what --json prints); memopt show REPORT.json prints it",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="add the step's predicted memory per op (without memopt and with the plan) to the "
        "JSON; traces every layer (memopt plot step REPORT.json draws it)",
    )
    p.add_argument(
        "--plot",
        metavar="STEP.png",
        help="draw the step's predicted memory timeline (implies --timeline; needs "
        "pip install memopt[plot])",
    )


def _parser(cmd: str) -> argparse.ArgumentParser:
    desc = {
        "plan": "Trace MODEL with fake tensors (no memory is allocated) and print memopt's plan "
        "table and the predicted peak memory of one training step.",
        "fit": "Find the largest batch (or sequence length) whose predicted peak fits --memory, "
        "with no optimization, at level 1 and with the budget planner.",
    }[cmd]
    p = _Parser(prog=f"memopt {cmd}", description=desc)
    p.add_argument("model", help="hf:TYPE (e.g. hf:llama) or package.module:factory")
    p.add_argument("--batch", type=int, default=None, help=f"batch size (default {DEFAULT_BATCH})")
    p.add_argument(
        "--seq",
        type=int,
        default=None,
        help=f"sequence length (default {DEFAULT_SEQ}, capped by the model's positions)",
    )
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        help="parameter dtype (hf: default bf16 for cuda, fp32 for cpu; factories keep theirs)",
    )
    p.add_argument(
        "--device-kind",
        choices=("cuda", "cpu"),
        default="cuda",
        help="device to plan for (default cuda; works without a GPU)",
    )
    p.add_argument(
        "--level",
        type=int,
        choices=(0, 1, 2),
        default=0 if cmd == "plan" else 1,
        help="memopt level ("
        + ("default 0" if cmd == "plan" else "the optimized row of the table, default 1")
        + ")",
    )
    p.add_argument("--probe-level", type=int, choices=(0, 1), default=None, help="default 1")
    p.add_argument(
        "--config",
        action="extend",
        nargs="+",
        default=[],
        metavar="ITEM",
        help="model config overrides key=value (hf: models) and/or plan strings "
        "ClusterId:Strategy:Count",
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument(
        "--state-dtype",
        choices=("fp32", "param"),
        default="fp32",
        help="dtype of Adam states: fp32 (default) or the parameter's (torch.optim.AdamW)",
    )
    p.add_argument("--master-weights", action="store_true", help="fp32 copy of 16-bit params")
    p.add_argument("--momentum", action="store_true", help="sgd with a momentum buffer")
    p.add_argument(
        "--depth",
        choices=("auto", "full"),
        default="auto",
        help="auto: models deeper than "
        + ("6" if cmd == "plan" else "12")
        + " layers are traced at 2 and 3 layers and extrapolated; full: all layers",
    )
    if cmd == "plan":
        p.add_argument(
            "--budget", help="plan with the budget planner: bytes ('70GiB') or a fraction"
        )
        _add_save_options(p)
    else:
        p.add_argument("--memory", required=True, help="device memory, e.g. 80GiB")
        p.add_argument("--solve-for", choices=("batch", "seq"), default="batch")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr for steps over 2 s: bars on a terminal with tqdm installed, "
        "else lines (default: when stderr is a terminal)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks and torch warnings")
    return p


def _seq_default(source: models.ModelSource, seq: int | None) -> tuple[int, list[str]]:
    limit = getattr(source, "max_positions", None)
    if seq is None:
        return (min(DEFAULT_SEQ, limit) if limit else DEFAULT_SEQ), []
    notes = []
    if limit and seq > limit:
        notes.append(f"seq {seq} exceeds the model's {limit} positions")
    return seq, notes


def _request(
    args: argparse.Namespace, source: models.ModelSource, symbolic: bool, full: bool = False
) -> Request:
    if (args.batch is not None and args.batch < 1) or (args.seq is not None and args.seq < 1):
        raise CliError("--batch and --seq must be positive", EXIT_USAGE)
    ignored = [
        k for k in ("batch", "seq") if getattr(args, k) is not None and k not in source.sizes
    ]
    if ignored:  # the factory makes its inputs without it: the setting would change nothing
        names = " and ".join(f"--{k}" for k in ignored)
        raise CliError(
            f"{names}: factory {source.name} has no {' or '.join(ignored)} parameter, so its "
            f"inputs do not depend on it; add the parameter to the factory or drop {names}",
            EXIT_USAGE,
        )
    seq, _ = _seq_default(source, args.seq)
    dtype = DTYPES[args.dtype] if args.dtype else None
    if dtype is None and args.model.startswith("hf:"):
        dtype = torch.bfloat16 if args.device_kind == "cuda" else torch.float32
    return Request(
        batch=DEFAULT_BATCH if args.batch is None else args.batch,
        seq=seq,
        dtype=dtype,
        device_kind=args.device_kind,
        depth="full" if full else args.depth,
        optimizer=args.optimizer,
        state_dtype=args.state_dtype,
        master_weights=args.master_weights,
        momentum=args.momentum,
        symbolic=symbolic,
    )


def _header(cmd: str, a: Analysis) -> list[str]:
    r = a.request
    dtype = str(r.dtype).replace("torch.", "") if r.dtype else "model dtype"
    where = r.device_kind
    if a.emulated:
        where += " (traced on fake CPU tensors with the GPU's attention kernels)"
    if a.extrapolated:
        depth = (
            f"traced at {a.traced_depths[0]} and {a.traced_depths[1]} of "
            f"{a.source.num_layers} layers and extrapolated (--depth full traces all)"
        )
    else:
        depth = "traced at full depth"
    taken = a.source.sizes
    shapes = f"symbolic {' and '.join(taken)}" if r.symbolic and taken else "static shapes"
    sizes = " x ".join(f"{k} {getattr(r, k)}" for k in taken) or "the factory's own input sizes"
    lines = [
        f"memopt {cmd} {a.source.name}: {a.model_class}, {a.static.num_parameters:,} parameters, "
        f"{dtype}, {sizes}, for {where}",
        f"  {depth}, {shapes}, in {a.trace_seconds:.1f} s",
    ]
    lines += [f"  note: {n}" for n in a.notes]
    return lines


def _base_dict(cmd: str, a: Analysis) -> dict:
    r = a.request
    return {
        "command": cmd,
        "model": a.source.name,
        "model_class": a.model_class,
        "parameters": a.static.num_parameters,
        # None for a size the factory does not take (its inputs' own)
        "batch": r.batch if "batch" in a.source.sizes else None,
        "seq": r.seq if "seq" in a.source.sizes else None,
        "dtype": str(r.dtype).replace("torch.", "") if r.dtype else None,
        "device_kind": r.device_kind,
        "emulated_cuda": a.emulated,
        "traced_depths": a.traced_depths,
        "num_layers": a.source.num_layers,
        "symbolic": r.symbolic,
        "trace_seconds": a.trace_seconds,
        "notes": list(a.notes),
    }


def _configs(args: argparse.Namespace, plans: list[str], levels: Sequence[int], budget=None):
    kw = {"probe_level": args.probe_level, "config": plans or None}
    return [resolve_config(level=lv, budget=budget, **kw) for lv in levels]


def run_plan(args: argparse.Namespace) -> int:
    with progress.reporting("plan", args.progress) as p:
        return _run_plan(args, p)


def _run_plan(args: argparse.Namespace, p: progress.Progress) -> int:
    p.phase("building the model")
    overrides, plans = models.split_overrides(args.config)
    source = models.resolve(args.model, overrides)
    budget = None
    if args.budget is not None:
        budget = parse_budget("--budget", args.budget)
    timeline = bool(args.timeline or args.plot)
    request = _request(args, source, symbolic=budget is None, full=timeline)
    if isinstance(budget, int):
        budget = budget - _optimizer_bytes(source, request)
    configs = _configs(args, plans, [args.level], budget)
    if timeline:  # the curves are drawn on the unoptimized step's graphs (config 0)
        configs = [resolve_config(level=0, probe_level=args.probe_level), *configs]
    p.phase("tracing", unit=progress.REGIONS)
    a = analyze(source, request, configs, keep_planner=timeline)
    p.phase("reporting")
    _, notes = _seq_default(source, args.seq)
    a.notes += notes
    if budget is not None:
        a.notes.append(
            "budget planner: static shapes (it plans at one size), optimizer states taken "
            "off the budget"
        )
    doc = _plan_document(a, timeline, request, configs[-1])
    _write_outputs(args, a.reports[-1], doc)
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print("\n".join(_header("plan", a)))
        print()
        print(a.reports[-1].table())
        print()
        print(a.peaks[-1].at(a.values).table())
    return EXIT_OK


def _optimizer_bytes(source: models.ModelSource, request: Request) -> int:
    from memopt.cli.peak import static_bytes

    full = source.build(batch=2, seq=2, dtype=request.dtype, layers=None)
    return static_bytes(
        full.model,
        optimizer=request.optimizer,
        state_dtype=request.state_dtype,
        master_weights=request.master_weights,
        momentum=request.momentum,
    ).optimizer


def _plan_document(a: Analysis, timeline: bool, request: Request, config) -> dict:
    """What ``--json`` prints and ``--save-report`` writes (``memopt show`` reads it)."""
    peak = a.peaks[-1].at(a.values)
    doc = {**_base_dict("plan", a), "report": a.reports[-1].to_dict(), "peak": peak.to_dict()}
    if timeline:
        doc["timeline"] = _timeline(a, request, config)
    return doc


def _timeline(a: Analysis, request: Request, config) -> dict | None:
    from memopt.cli.timeline import build_problem, step_timeline

    if len(a.planner) != 1:
        a.notes.append("no timeline: the step compiled to several graphs (graph breaks)")
        return None
    problem = build_problem(
        a.planner[0],
        a.names,
        a.values,
        device_kind=request.device_kind,
        offload_min_bytes=config.offload_min_bytes,
    )
    label = f"{a.source.name}, batch {request.batch} x seq {request.seq}"
    return step_timeline(problem, a.reports[-1].frozen_plan(), label=label)


def _write_outputs(args: argparse.Namespace, report, doc: dict) -> None:
    """``--save`` (the frozen plan), ``--save-report`` (the JSON document), ``--plot``."""
    if args.save:
        _write_json(args.save, report.frozen_plan(), "--save")
    if args.save_report:
        _write_json(args.save_report, doc, "--save-report")
    if args.plot:
        if doc.get("timeline") is None:
            raise CliError("--plot: no timeline (see the notes)", EXIT_TRACE)
        from memopt.plot import plot_step

        plot_step(doc["timeline"], args.plot)
        print(f"memopt plan: wrote {args.plot}", file=sys.stderr)


def _write_json(path: str, data: dict, option: str) -> None:
    try:
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=str)
            f.write("\n")
    except OSError as e:
        raise CliError(f"{option}: cannot write {path}: {e.strerror}", EXIT_USAGE) from None


def run_fit(args: argparse.Namespace) -> int:
    with progress.reporting("fit", args.progress) as p:
        return _run_fit(args, p)


def _run_fit(args: argparse.Namespace, p: progress.Progress) -> int:
    p.phase("building the model")
    overrides, plans = models.split_overrides(args.config)
    source = models.resolve(args.model, overrides)
    memory = parse_budget("--memory", args.memory)
    if not isinstance(memory, int):
        raise CliError("--memory takes bytes, e.g. 80GiB", EXIT_USAGE)
    if args.solve_for not in source.sizes:  # known before tracing: say it now
        raise CliError(
            f"--solve-for {args.solve_for}: factory {source.name} has no {args.solve_for}= "
            "parameter, so its inputs cannot vary in it",
            EXIT_USAGE,
        )
    request = _request(args, source, symbolic=True)
    configs = [resolve_config(level=0, probe_level=args.probe_level)]
    configs += _configs(args, plans, [args.level])
    p.phase("tracing", unit=progress.REGIONS)
    a = analyze(source, request, configs, keep_planner=True, full_depth_up_to=FIT_FULL_DEPTH_UP_TO)
    _, notes = _seq_default(source, args.seq)
    a.notes += notes
    what = args.solve_for
    if what not in a.names.values():
        raise CliError(
            f"the traced inputs have no dimension of size {getattr(request, what)} to vary "
            f"({what}); a factory must build its inputs from its {what}= argument",
            EXIT_TRACE,
        )
    rows = [
        fit_model("none (level 0)", a.peaks[0], memory, a.values, what),
        fit_model(f"level {args.level}", a.peaks[1], memory, a.values, what),
    ]
    if a.planner and len(a.planner) == 1:
        p.phase(f"planning at each {what} size", unit="sizes", solves=True)
        rows.append(
            fit_planner(
                a.planner[0],
                a.peaks[0],
                memory,
                a.names,
                a.values,
                what,
                device_kind=request.device_kind,
                offload_min_bytes=configs[-1].offload_min_bytes,
            )
        )
    else:
        why = "needs --depth full" if a.extrapolated else "needs a single compiled graph"
        rows.append(FitRow("planner", None, None, why))
    p.phase("reporting")
    if args.json:
        out = {
            **_base_dict("fit", a),
            "memory": memory,
            "solve_for": what,
            "rows": [r.to_dict() for r in rows],
        }
        print(json.dumps(out, indent=1, default=str))
        return EXIT_OK
    print("\n".join(_header("fit", a)))
    fixed = f"seq {request.seq}" if what == "batch" else f"batch {request.batch}"
    print(f"\nLargest {what} whose predicted peak fits {fmt_bytes(memory)} ({fixed}):")
    print(_fit_table(rows, what))
    return EXIT_OK


def _fit_table(rows: Sequence[FitRow], what: str) -> str:
    from tabulate import tabulate

    body = []
    for r in rows:
        if r.largest is None:
            n = "-"
        elif r.largest == 0:
            n = f"0 (not even {what} 1)"
        else:
            n = str(r.largest)
        peak = "-" if r.peak_bytes is None else fmt_bytes(r.peak_bytes)
        body.append([r.strategy, n, peak, r.note])
    return tabulate(body, headers=["strategy", f"largest {what}", "predicted peak", "note"])


@contextlib.contextmanager
def _quiet(debug: bool) -> Iterator[None]:
    if debug:
        yield
        return
    previous = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)  # torch logs failed guards etc. at ERROR
        try:
            yield
        finally:
            logging.disable(previous)


COMMANDS = ("plan", "fit", "show", "plot")


def main(argv: Sequence[str] | None = None) -> int:
    """``memopt plan|fit|show|plot ...``: returns the exit code (argv starts with the command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: memopt {{{','.join(COMMANDS)}}} ... [options]", file=sys.stderr)
        return EXIT_USAGE
    cmd = argv[0]
    if cmd in ("show", "plot"):
        from memopt.cli import show
        from memopt.plot import main as plot

        return show.main(argv[1:]) if cmd == "show" else plot(argv[1:])
    parser = _parser(cmd)
    parser.argv = argv[1:]
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as e:  # argparse printed the usage/error (or --help)
        return int(e.code or 0)
    try:
        with _quiet(args.debug):
            return run_plan(args) if cmd == "plan" else run_fit(args)
    except CliError as e:
        _fail(cmd, str(e), args.debug)
        return e.code
    except (PlanError, ConfigError) as e:
        _fail(cmd, str(e), args.debug)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug, or a torch failure outside tracing
        _fail(cmd, f"unexpected {one_line(e)} (--debug shows the traceback)", args.debug)
        return EXIT_TRACE


def _fail(cmd: str, message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    print(f"memopt {cmd}: error: {message}", file=sys.stderr)
