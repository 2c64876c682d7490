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

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEFAULT_SEQ = 2048


def _parser(cmd: str) -> argparse.ArgumentParser:
    desc = {
        "plan": "Trace MODEL with fake tensors (no memory is allocated) and print memopt's plan "
        "table and the predicted peak memory of one training step.",
        "fit": "Find the largest batch (or sequence length) whose predicted peak fits --memory, "
        "with no optimization, at level 1 and with the budget planner.",
    }[cmd]
    p = argparse.ArgumentParser(prog=f"memopt {cmd}", description=desc)
    p.add_argument("model", help="hf:TYPE (e.g. hf:llama) or package.module:factory")
    p.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
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
    else:
        p.add_argument("--memory", required=True, help="device memory, e.g. 80GiB")
        p.add_argument("--solve-for", choices=("batch", "seq"), default="batch")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="phase lines on stderr for steps over 2 s (default: when stderr is a terminal)",
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


def _request(args: argparse.Namespace, source: models.ModelSource, symbolic: bool) -> Request:
    if args.batch < 1 or (args.seq is not None and args.seq < 1):
        raise CliError("--batch and --seq must be positive", EXIT_USAGE)
    seq, _ = _seq_default(source, args.seq)
    dtype = DTYPES[args.dtype] if args.dtype else None
    if dtype is None and args.model.startswith("hf:"):
        dtype = torch.bfloat16 if args.device_kind == "cuda" else torch.float32
    return Request(
        batch=args.batch,
        seq=seq,
        dtype=dtype,
        device_kind=args.device_kind,
        depth=args.depth,
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
    shapes = "symbolic batch and seq" if r.symbolic else "static shapes"
    lines = [
        f"memopt {cmd} {a.source.name}: {a.model_class}, {a.static.num_parameters:,} parameters, "
        f"{dtype}, batch {r.batch} x seq {r.seq}, for {where}",
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
        "batch": r.batch,
        "seq": r.seq,
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
    request = _request(args, source, symbolic=budget is None)
    if isinstance(budget, int):
        from memopt.cli.peak import static_bytes

        full = source.build(batch=2, seq=2, dtype=request.dtype, layers=None)
        opt = static_bytes(
            full.model,
            optimizer=request.optimizer,
            state_dtype=request.state_dtype,
            master_weights=request.master_weights,
            momentum=request.momentum,
        ).optimizer
        budget = budget - opt
    configs = _configs(args, plans, [args.level], budget)
    p.phase("tracing")
    a = analyze(source, request, configs)
    p.phase("reporting")
    _, notes = _seq_default(source, args.seq)
    a.notes += notes
    if budget is not None:
        a.notes.append(
            "budget planner: static shapes (it plans at one size), optimizer states taken "
            "off the budget"
        )
    peak = a.peaks[0].at(a.values)
    if args.json:
        out = {**_base_dict("plan", a), "report": a.reports[0].to_dict(), "peak": peak.to_dict()}
        print(json.dumps(out, indent=1, default=str))
    else:
        print("\n".join(_header("plan", a)))
        print()
        print(a.reports[0].table())
        print()
        print(peak.table())
    return EXIT_OK


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
    request = _request(args, source, symbolic=True)
    configs = [resolve_config(level=0, probe_level=args.probe_level)]
    configs += _configs(args, plans, [args.level])
    p.phase("tracing")
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
        p.phase(f"building the planner's problem at each {what}")
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


def main(argv: Sequence[str] | None = None) -> int:
    """``memopt plan|fit ...``: returns the exit code (argv starts with the command name)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("plan", "fit"):
        print("usage: memopt {plan,fit} MODEL [options]", file=sys.stderr)
        return EXIT_USAGE
    cmd = argv[0]
    try:
        args = _parser(cmd).parse_args(argv[1:])
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
