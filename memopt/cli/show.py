"""``memopt show REPORT.json``: print a saved report as the table training prints.

Reads either a report (``memopt.report(model).to_dict()`` written as JSON) or the document
``memopt plan --json`` prints / ``--save-report`` writes (the report under ``"report"``, plus
the request and the predicted peak, which are printed too).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import sympy

from memopt.cli.errors import EXIT_OK, EXIT_USAGE, CliError
from memopt.cli.peak import PHASE_TEXT
from memopt.config import MemoptConfig
from memopt.errors import PlanError
from memopt.format import pretty_expr
from memopt.plan import parse_plans
from memopt.report import RegionReport, Report
from memopt.symbolic import fmt_bytes


def load_document(path: str) -> dict[str, Any]:
    """The JSON object in ``path`` (a :class:`CliError` that says what is wrong otherwise)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}", EXIT_USAGE) from None
    except ValueError as e:
        raise CliError(f"{path} is not JSON ({e})", EXIT_USAGE) from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a JSON object, got {type(data).__name__}", EXIT_USAGE)
    return data


def report_from_dict(d: Mapping[str, Any]) -> Report:
    """The :class:`Report` whose ``to_dict()`` gave ``d``."""
    missing = [k for k in ("level", "config", "probe_level", "regions") if k not in d]
    if missing:
        raise CliError(
            f"not a memopt report: no {', '.join(missing)} (write one with "
            "json.dump(memopt.report(model).to_dict(), f) or memopt plan --save-report)",
            EXIT_USAGE,
        )
    try:
        config = MemoptConfig(
            level=int(d["level"]),
            plans=parse_plans(list(d["config"])),
            probe_level=int(d["probe_level"]),
            sources=dict(d.get("sources") or {}),
        )
        regions = [RegionReport.from_dict(r) for r in d["regions"]]
    except (PlanError, TypeError, ValueError) as e:
        raise CliError(f"not a memopt report: {e}", EXIT_USAGE) from None
    return Report(config, regions, placement=list(d.get("placement") or []))


def peak_lines(peak: Mapping[str, Any]) -> list[str]:
    """The predicted-peak block of ``memopt plan`` from its JSON form."""
    at = PHASE_TEXT.get(peak["phase"], peak["phase"])
    known = peak["peak_bytes"] is not None and peak["peak_bytes"] >= 0
    if known:
        lines = [
            f"Predicted peak of one training step: {fmt_bytes(peak['peak_bytes'])} "
            f"({peak['peak_bytes']:,} B), at the {at}"
        ]
    else:  # a size without a value (an input whose dims are not batch or seq)
        free = sorted(
            {str(s) for s in sympy.sympify(peak["peak_symbolic"]).free_symbols}
            - set(peak.get("values") or {})
        )
        lines = [
            f"Predicted peak of one training step: unknown at these sizes, at the {at}: "
            f"no value for {', '.join(free) or 'a size'} (the formula below holds)"
        ]
    rows = peak.get("components", {})
    width = max((len(k) for k in rows), default=0)
    for name, r in rows.items():
        lines.append(
            f"  {name:<{width}}  {fmt_bytes(r['bytes']):>11}  = "
            f"{_formula(r['symbolic']):<40}  ({r['note']})"
        )
    total = fmt_bytes(peak["peak_bytes"]) if known else "?"
    lines.append(f"  {'total':<{width}}  {total:>11}  = {_formula(peak['peak_symbolic'])}")
    moves = peak.get("moves")
    if moves:  # the formula above holds up to the batch before it
        lines.append(
            f"  from batch {moves['from_batch']} the peak is elsewhere, at the "
            f"{PHASE_TEXT.get(moves['phase'], moves['phase'])}: {_formula(moves['symbolic'])}"
        )
    return lines


def _formula(text: str) -> str:
    """A symbolic byte count from JSON, expanded and printed readably (``ceil(seq/32)``)."""
    return pretty_expr(sympy.expand(sympy.sympify(text)))


def render(doc: Mapping[str, Any]) -> str:
    """The text ``memopt show`` prints for a loaded document."""
    lines: list[str] = []
    report = doc.get("report", doc)
    if "report" in doc:
        dtype = doc.get("dtype") or "model dtype"
        lines += [
            f"memopt {doc.get('command', 'plan')} {doc.get('model')}: {doc.get('model_class')}, "
            f"{doc.get('parameters', 0):,} parameters, {dtype}, batch {doc.get('batch')} x seq "
            f"{doc.get('seq')}, for {doc.get('device_kind')}",
            *[f"  note: {n}" for n in doc.get("notes", ())],
            "",
        ]
    lines.append(report_from_dict(report).table())
    if doc.get("peak"):
        lines += ["", *peak_lines(doc["peak"])]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="memopt show",
        description="Print a saved report (memopt plan --save-report, or "
        "json.dump(memopt.report(model).to_dict(), f)) as the plan table.",
    )
    p.add_argument("report", metavar="REPORT.json")
    p.add_argument(
        "--frozen",
        action="store_true",
        help="print the plan file ({config, sync}) that re-applies the report's plan instead",
    )
    try:
        args = p.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    try:
        doc = load_document(args.report)
        if args.frozen:
            frozen = report_from_dict(doc.get("report", doc)).frozen_plan()
            print(json.dumps(frozen, indent=1))
        else:
            print(render(doc))
    except CliError as e:
        print(f"memopt show: error: {e}", file=sys.stderr)
        return e.code
    except ValueError as e:  # frozen_plan: regions with different sync dicts
        print(f"memopt show: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
