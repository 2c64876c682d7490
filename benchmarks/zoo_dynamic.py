"""The zoo under dynamic shapes: memopt with ``dynamic=True`` at two batch sizes (issue 14).

Per model of benchmarks/zoo_models.py (random weights, tiny sizes), each compiled once with
``dynamic=True`` and called at batch ``B1`` then ``B2``:

* **correct**: memopt at level 1 gives plain ``torch.compile(dynamic=True)``'s loss and
  gradients at both sizes (the zoo's tolerance, or within the spread of torch.compile's own);
* **estimate**: the report (evaluated at the latest call's sizes) against the bytes measured
  with saved-tensor hooks at ``B2``: level 0 against torch.compile's, level 1 against memopt's;
  the report re-evaluated at ``B1`` (``report.at``) against memopt's bytes at ``B1``;
* **budget**: ``budget=0.5`` at both sizes: the planner's verdict and the bytes it cut.

No crash in symbolic evaluation is the first point: a model that raises has an ``error`` row.
Writes docs/data/zoo_dynamic_<device>.json and a table into docs/zoo.md::

    python benchmarks/zoo_dynamic.py                  # the main zoo
    python benchmarks/zoo_dynamic.py --models vit,t5  # some of them (the JSON's others kept)
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import memopt  # noqa: E402
from benchmarks.zoo import (  # noqa: E402
    BY_NAME,
    _agree,
    _merged,
    _n,
    _within_spread,
    build,
    one_step,
    write_table,
)
from benchmarks.zoo_models import ZOO, available  # noqa: E402
from memopt import _torch_compat as compat  # noqa: E402

B1, B2 = 2, 3
BUDGET = 0.5
#: what check_model is doing (a timed-out row names it)
PHASE = ["start"]


def _sizes(rep) -> dict[str, int]:
    """The report's size symbols at the latest call (names and values)."""
    return {str(k): int(v) for k, v in rep.symbols().items()}


def _at(rep, first: dict[str, int], latest: dict[str, int]):
    """The report evaluated at the first call's sizes (those that changed between calls)."""
    chosen = {k: v for k, v in first.items() if latest.get(k) != v}
    return rep.at(**chosen) if chosen else rep


def check_model(name: str, dtype=torch.float32) -> dict[str, Any]:
    entry = BY_NAME[name]
    t0 = time.perf_counter()
    runs = {b: build(entry, "tiny", "cpu", dtype, batch=b) for b in (B1, B2)}
    model = runs[B1][0]
    inputs = {b: runs[b][1] for b in runs}
    for b in (B2,):  # one model (the first build's weights) for both sizes
        del runs[b]

    def steps(compiled) -> dict[int, tuple]:
        return {b: one_step(model, compiled, inputs[b]) for b in (B1, B2)}

    torch._dynamo.reset()
    PHASE[0] = "torch.compile(dynamic=True)"
    base = steps(torch.compile(model, dynamic=True))
    refs = {b: [one_step(model, model, inputs[b])[1]] for b in (B1, B2)}  # eager's

    def matches(got: dict[int, tuple]) -> bool:
        ok = True
        for b in (B1, B2):
            l0, g0, _ = base[b]
            l1, g1, _ = got[b]
            ok &= _agree(l0, g0, l1, g1, dtype)[0] or _within_spread(g0, refs[b], g1, dtype)
        return bool(ok)

    torch._dynamo.reset()
    PHASE[0] = "memopt level 1"
    opt = memopt.optimize(model, level=1, dynamic=True)
    lvl1 = {B1: one_step(model, opt, inputs[B1])}
    sizes_first = _sizes(memopt.report(opt))
    lvl1[B2] = one_step(model, opt, inputs[B2])
    rep = memopt.report(opt)
    latest = _sizes(rep)
    predicted0, predicted1 = rep.saved_bytes()
    first_pred = _at(rep, sizes_first, latest).saved_bytes()[1]
    torch._dynamo.reset()
    PHASE[0] = f"memopt budget={BUDGET}"
    bud = memopt.optimize(model, budget=BUDGET, dynamic=True)
    cut = steps(bud)
    brep = memopt.report(bud)
    if len(brep.regions) > 1:  # a step of several regions is planned after its first run
        cut[B2] = one_step(model, bud, inputs[B2])
        brep = memopt.report(bud)
    verdicts = [r.extra.get("planner", {}).get("feasible") for r in brep.regions]
    step = brep.step
    feasible = step.feasible if step is not None and step.feasible is not None else verdicts
    return {
        "model": name,
        "kind": entry.kind,
        "regions": len(rep.regions),
        "sizes_from": rep.sizes_from,
        "symbols": latest,
        "grads_match": matches(lvl1),
        "measured": base[B2][2].compiled,
        "predicted": predicted0,
        "exact": predicted0 == base[B2][2].compiled,
        "level1_measured": lvl1[B2][2].compiled,
        "level1_predicted": predicted1,
        "level1_exact": predicted1 == lvl1[B2][2].compiled,
        "first_measured": lvl1[B1][2].compiled,
        "first_predicted": first_pred,
        "first_exact": first_pred == lvl1[B1][2].compiled,
        "budget_measured": cut[B2][2].compiled,
        "budget_predicted": brep.saved_bytes()[1],
        "budget_feasible": feasible,
        "budget_grads_match": matches(cut),
        "seconds": round(time.perf_counter() - t0, 1),
    }


class _Late(Exception):
    pass


def _late(signum, frame):
    raise _Late


def _row(name: str, timeout: int) -> dict[str, Any]:
    entry = BY_NAME[name]
    if not available(entry):
        return {"model": name, "kind": entry.kind, "skipped": f"needs {entry.needs}"}
    PHASE[0] = "building"
    signal.signal(signal.SIGALRM, _late)
    signal.alarm(timeout)
    try:
        with compat.no_compile_caches():
            row = check_model(name)
    except _Late:
        row = {"model": name, "kind": entry.kind, "error": f"over {timeout} s in {PHASE[0]}"}
    except Exception as e:  # one broken model must not hide the others' rows
        late = "_Late" in repr(e) or isinstance(e.__cause__, _Late)  # raised inside dynamo
        traceback.print_exc()
        error = f"over {timeout} s in {PHASE[0]}" if late else f"in {PHASE[0]}: {e!r}"
        row = {"model": name, "kind": entry.kind, "error": error[:300]}
    finally:
        signal.alarm(0)
    print(json.dumps(row), flush=True)
    return row


def _yes(ok: Any) -> str:
    return "yes" if ok is True else ("**no**" if ok is False else str(ok))


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        f"| model | kind | regions | grads (B={B1},{B2}) | level 0 at B={B2}: measured / "
        f"predicted | level 1 at B={B2} | level 1 at B={B1} (`report.at`) | budget {BUDGET}: "
        "feasible, saved |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        if "skipped" in r or "error" in r:
            lines.append(f"| {r['model']} | {r['kind']} | {r.get('skipped') or r['error']} |")
            continue

        def pair(m, p, exact):
            return f"{_n(m)} / {_n(p)}" + ("" if exact else " **miss**")

        lines.append(
            f"| {r['model']} | {r['kind']} | {r['regions']} | {_yes(r['grads_match'])} | "
            f"{pair(r['measured'], r['predicted'], r['exact'])} | "
            f"{pair(r['level1_measured'], r['level1_predicted'], r['level1_exact'])} | "
            f"{pair(r['first_measured'], r['first_predicted'], r['first_exact'])} | "
            f"{_yes(r['budget_feasible'])}, {_n(r['budget_measured'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="", help="comma-separated (default: the main zoo)")
    p.add_argument("--out", default=str(ROOT / "docs" / "data"))
    p.add_argument("--markdown", default=str(ROOT / "docs" / "zoo.md"))
    p.add_argument("--timeout", type=int, default=900, help="seconds per model")
    args = p.parse_args(argv)
    names = [n for n in args.models.split(",") if n] or [m.name for m in ZOO]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown zoo models: {', '.join(unknown)}")
    path = Path(args.out) / "zoo_dynamic_cpu.json"
    meta = {"torch": torch.__version__, "device": "cpu", "dynamic": True, "batches": [B1, B2]}
    for name in names:  # written after each model: a long sweep cut short keeps its rows
        merged = _merged(path, meta, [_row(name, args.timeout)])
        path.write_text(json.dumps({**meta, "rows": merged}, indent=1))
    write_table(Path(args.markdown), markdown(merged), "dynamic_cpu")


if __name__ == "__main__":
    main()
