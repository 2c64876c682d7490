"""The zoo: memopt on every architecture of benchmarks/zoo_models.py.

Per model (random weights, one training step):

* **correct**: memopt at level 1 gives the loss and gradients of plain ``torch.compile`` (where
  those differ from eager's, memopt's are no farther from either than they are from each other);
* **estimate**: the report's level-0 estimate (activation bytes saved for backward without
  memopt) against the bytes measured with saved-tensor hooks under plain ``torch.compile``
  (parameters, buffers and inputs left out; bytes saved by eager code between graph breaks,
  which no compiled graph sees, are listed apart as ``eager``);
* **budget**: ``budget=0.5`` applied: the planner's verdict, its plan strings, and the saved
  bytes measured after it.

Writes the table into docs/zoo.md (between ``<!-- zoo <device> -->`` markers) and
docs/data/zoo_<device>.json::

    python benchmarks/zoo.py                       # every model, tiny sizes, CPU
    python benchmarks/zoo.py --models vit,resnet   # some of them (the JSON's other rows kept)
    python benchmarks/zoo.py --device cuda --size gpu --dtype bfloat16   # the GPU machine
    python benchmarks/zoo.py --wide                # the wide zoo (benchmarks/zoo_wide.py), tiny
    python benchmarks/zoo.py --wide --device cuda --jobs 8   # on a GPU, 8 models at a time
"""

from __future__ import annotations

import argparse
import copy
import json
import os
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
from benchmarks.zoo_models import ZOO, ZooModel, available, step_loss  # noqa: E402
from benchmarks.zoo_wide import ZOO_WIDE  # noqa: E402
from memopt import _torch_compat as compat  # noqa: E402
from memopt._torch_compat.compile_info import dynamo_graphs  # noqa: E402
from memopt.measure import SavedMeasurement, measure_saved  # noqa: E402

BUDGET = 0.5
#: the main zoo and the wide one, by name
BY_NAME = {m.name: m for m in (*ZOO, *ZOO_WIDE)}
#: level-1 gradients against plain torch.compile: recompute may reorder float sums
TOLERANCE = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (2e-2, 2e-2)}


def _to(x: Any, device: str, dtype: torch.dtype) -> Any:
    """``x`` on ``device``, floats in ``dtype``, inside tuples, lists and dicts too (HunyuanDiT's
    ``image_rotary_emb`` is a (cos, sin) pair)."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype)
    if isinstance(x, tuple | list):
        return type(x)(_to(v, device, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device, dtype) for k, v in x.items()}
    return x


def _tensors(x: Any) -> list[torch.Tensor]:
    """The tensors in ``x``, inside tuples, lists and dicts too."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, tuple | list):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def build(entry: ZooModel, size: str, device: str, dtype: torch.dtype, batch: int | None = None):
    """The model and inputs on ``device`` in ``dtype`` (seeded: the same weights each call);
    ``batch``: other than the size's own."""
    torch.manual_seed(0)
    model, inputs = entry.build(size, batch)
    model = model.to(device=device, dtype=dtype)
    return model, {k: _to(v, device, dtype) for k, v in inputs.items()}


def one_step(model, compiled, inputs) -> tuple[torch.Tensor, dict, SavedMeasurement]:
    """Forward (measured) and backward; returns the loss, the gradients and what was saved."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)  # the same random draws (DiT's class-label dropout) in every run
    # the batch is no activation, nested inputs too (HunyuanDiT's rotary (cos, sin) pair)
    exclude = [*model.parameters(), *model.buffers(), *_tensors(inputs)]
    loss, saved = measure_saved(lambda: step_loss(compiled(**inputs)), exclude)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, saved


def _same_keys(*grads: dict) -> list[dict]:
    """The gradient dicts over the union of their parameters, a missing gradient (None after
    ``zero_grad(set_to_none=True)``: the step gave that parameter none) as zeros: it agrees
    with a zero gradient and with nothing else (Llava's unused ``post_layernorm`` gets zeros
    in plain torch.compile's first step and none in eager or in its second step)."""
    like: dict = {}
    for g in grads:
        for k, v in g.items():
            like.setdefault(k, v)
    return [{k: g[k] if k in g else torch.zeros_like(v) for k, v in like.items()} for g in grads]


def _grad_error(g0: dict, g1: dict, dtype: torch.dtype) -> tuple[bool, float]:
    """Whether the gradients agree within the tolerance, and the largest relative error."""
    g0, g1 = _same_keys(g0, g1)
    rtol, atol = TOLERANCE.get(dtype, TOLERANCE[torch.float32])
    worst, ok = 0.0, True
    for k in g0:
        a, b = g0[k].float(), g1[k].float()
        err = ((a - b).abs() / (b.abs() + atol)).max().item() if a.numel() else 0.0
        worst = max(worst, err)
        ok = ok and torch.allclose(a, b, rtol=rtol, atol=atol)
    return ok, worst


def _agree(l0, g0, l1, g1, dtype) -> tuple[bool, float]:
    """Whether two steps' losses and gradients agree, and the largest relative gradient error."""
    ok, err = _grad_error(g0, g1, dtype)
    return ok and torch.allclose(l0.float(), l1.float(), *TOLERANCE.get(dtype, (1e-4, 1e-5))), err


def _within_spread(g0: dict, refs: list[dict], g1: dict, dtype=torch.float32) -> bool:
    """Whether every gradient of ``g1`` agrees with torch.compile's (``g0``) within the
    tolerance or is as close to it or to another reference (``refs``: eager's, and
    torch.compile's own second step, whose nondeterministic kernels differ run to run) as
    the farthest of those is from ``g0`` (largest absolute difference)."""
    rtol, atol = TOLERANCE.get(dtype, TOLERANCE[torch.float32])
    g0, g1, *refs = _same_keys(g0, g1, *refs)

    def dist(a, b):
        return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0

    def ok(k):
        a, b = g1[k].float(), g0[k].float()
        spread = max(dist(g[k], g0[k]) for g in refs)
        near = min(dist(g1[k], g[k]) for g in (g0, *refs)) <= spread
        return near or torch.allclose(a, b, rtol=rtol, atol=atol)

    return all(ok(k) for k in g0)


#: how much farther from the float64 truth than the farthest reference memopt may be
TRUTH_FACTOR = 2.0


def _within_truth(truth: dict, refs: list[dict], g1: dict) -> bool:
    """Whether ``g1``'s largest error against a float64 step's gradients (``truth``; over
    the model's largest true gradient) is at most :data:`TRUTH_FACTOR` times the largest of
    the references' (torch.compile's, eager's float32): a wrong gradient is off by the
    gradient's own size, rounding by what the references show."""
    scale = max((t.abs().max().item() for t in truth.values() if t.numel()), default=0.0) or 1.0

    def worst(g: dict) -> float:
        return (
            max(
                ((g[k].double() - t).abs().max().item() for k, t in truth.items() if t.numel()),
                default=0.0,
            )
            / scale
        )

    truth, g1, *refs = _same_keys(truth, g1, *refs)
    return worst(g1) <= TRUTH_FACTOR * max(worst(g) for g in refs)


def _compiled(model, **kwargs):
    torch._dynamo.reset()
    return memopt.optimize(model, **kwargs) if kwargs else torch.compile(model)


def _planner(report) -> dict[str, Any]:
    """The budget's plan strings (the step's plan file: the regions it ran) and whether the
    planner called it feasible (the step plan's verdict where one was made)."""
    try:
        plans = report.frozen_plan()["config"]
    except ValueError:  # regions offloading on different sync dicts
        plans = [
            s for r in report.regions for s in r.extra.get("planner", {}).get("plan_strings", [])
        ]
    step = report.step
    if step is not None and step.feasible is not None:
        return {"plan_strings": plans, "feasible": bool(step.feasible)}
    feasible = [bool(r.extra.get("planner", {}).get("feasible")) for r in report.regions]
    return {"plan_strings": plans, "feasible": bool(feasible) and all(feasible)}


def check_model(entry: ZooModel, size: str = "tiny", device: str = "cpu", dtype=torch.float32):
    """The zoo's three checks on one model; a JSON-ready dict."""
    t0 = time.perf_counter()
    model, inputs = build(entry, size, device, dtype)
    # one eager forward first: a model's one-time setup at its first call would split plain
    # torch.compile's first step into graphs that no later compile of the model (memopt's
    # below) has. transformers 5 installs its output-capturing hooks under a threading.Lock,
    # a graph break: DPT measured 2 graphs against a 1-region prediction, 5,168 B apart
    # (docs/data/sweep8/diag_dpt)
    with torch.no_grad():
        torch.manual_seed(0)
        step_loss(model(**inputs))
    compiled = _compiled(model)
    graphs = dynamo_graphs()
    l0, g0, base = one_step(model, compiled, inputs)
    graphs = dynamo_graphs() - graphs
    refs: list[dict] = []  # eager's and torch.compile's second step, when needed
    truth: list[dict] = []  # a float64 eager step's, when needed

    def matches(loss, grads) -> bool:
        if _agree(l0, g0, loss, grads, dtype)[0]:
            return True
        # torch.compile's own gradients can differ from eager's (Falcon's fp32 CPU graph by
        # 3e-4, MobileNetV2's by 2e-3) and, on a GPU, from run to run (atomics in LeViT's
        # attention-bias backward): then memopt's may be no farther from one of them than
        # they are from each other
        if not refs:
            refs.append(one_step(model, model, inputs)[1])
            refs.append(one_step(model, compiled, inputs)[1])
        if _within_spread(g0, refs, grads, dtype):
            return True
        # else against the float64 truth: rounding (LeViT's batch-norm biases, whose true
        # gradient is zero, on a GPU) leaves memopt as near as the references are
        if not truth:
            ref = copy.deepcopy(model).double()
            wide = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
            truth.append(one_step(ref, ref, wide)[1])
        return _within_truth(truth[0], [g0, *refs], grads)

    opt = _compiled(model, level=1)
    l1, g1, lvl1 = one_step(model, opt, inputs)
    rep = memopt.report(opt)
    predicted, predicted_l1 = rep.saved_bytes()
    ok, err = _agree(l0, g0, l1, g1, dtype)
    ok = ok or matches(l1, g1)
    ref = "torch.compile or eager" if refs else "torch.compile"
    budget = _compiled(model, budget=BUDGET)
    lb, gb, cut = one_step(model, budget, inputs)
    brep = memopt.report(budget)
    steps = 1
    if len(brep.regions) > 1:  # a step of several regions is planned as a whole after its
        lb, gb, cut = one_step(model, budget, inputs)  # first run: measure the planned step
        brep, steps = memopt.report(budget), 2
    if brep.step is not None and brep.step.plan_pending:  # the second step ran other graphs
        lb, gb, cut = one_step(model, budget, inputs)  # (DBRX's routing): its own plan
        brep, steps = memopt.report(budget), steps + 1
    budget_ok = matches(lb, gb)
    return {
        "model": entry.name,
        "kind": entry.kind,
        "class": type(model).__name__,
        "regions": len(rep.regions),
        "plain_graphs": graphs,  # torch.compile's in the measured step: "exact" compares
        # like with like when they are the regions memopt planned
        "grads_match": bool(ok),
        "grads_reference": ref,
        "max_rel_grad_error": err,
        "measured": base.compiled,
        "measured_eager": base.eager,
        "predicted": predicted,
        "exact": predicted == base.compiled,
        "level1_measured": lvl1.compiled,
        "level1_predicted": predicted_l1,
        "level1_compiled": rep.compiled_saved_bytes(),  # Inductor's buffers, as compiled
        "budget": BUDGET,
        "budget_measured": cut.compiled,
        "budget_predicted": brep.saved_bytes()[1],
        "budget_compiled": brep.compiled_saved_bytes(),
        "budget_step": steps,
        "budget_grads_match": bool(budget_ok),
        **{f"budget_{k}": v for k, v in _planner(brep).items()},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _row(name: str, size: str, device: str, dtype_name: str, threads: int = 0) -> dict[str, Any]:
    """One model's row (a broken model's row names its error); printed as it is done."""
    if threads:
        torch.set_num_threads(threads)
    entry, dtype = BY_NAME[name], getattr(torch, dtype_name)
    if dtype == torch.float32:
        # the fp32 tolerance is for fp32 arithmetic: cuDNN's convolutions default to TF32
        # (10-bit mantissas), which moves torch.compile's and memopt's gradients apart by 1e-3
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    if not available(entry):
        print(f"{name}: skipped (needs {entry.needs})", flush=True)
        return {"model": name, "kind": entry.kind, "skipped": f"needs {entry.needs}"}
    try:
        with compat.no_compile_caches():  # a warm cache would skip the partitioner under test
            row = check_model(entry, size, device, dtype)
    except Exception as e:  # one broken model must not hide the others' rows
        traceback.print_exc()
        row = {"model": name, "kind": entry.kind, "error": f"{type(e).__name__}: {e}"[:300]}
    print(json.dumps(row), flush=True)
    return row


def run(names, size: str, device: str, dtype, jobs: int = 1) -> list[dict[str, Any]]:
    """The rows of ``names`` in their order; ``jobs`` > 1: that many worker processes (spawned,
    so CUDA works; the cores shared among them)."""
    dtype_name = str(dtype).removeprefix("torch.")
    if jobs <= 1:
        return [_row(n, size, device, dtype_name) for n in names]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_row, n, size, device, dtype_name, threads) for n in names]
        return [f.result() for f in futures]


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _grads(row: dict[str, Any]) -> str:
    """The grads column: whether memopt's match, and against eager where torch.compile's
    own differ from eager's."""
    ref = row.get("grads_reference", "torch.compile")
    return _mark(row["grads_match"]) + ("" if ref == "torch.compile" else f" ({ref})")


def _n(value: int | None) -> str:
    """A byte count, or "unknown" where the report could not evaluate one."""
    return "unknown" if value is None else f"{value:,}"


def markdown(rows: list[dict[str, Any]], device: str, size: str) -> str:
    head = (
        f"| model | kind | regions | grads = torch.compile (or eager) | measured | predicted | exact "
        f"| eager (graph breaks) | level 1 measured | budget {BUDGET}: plan | budget measured |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if "skipped" in r or "error" in r:
            lines.append(f"| {r['model']} | {r['kind']} | {r.get('skipped') or r['error']} |")
            continue
        plan = "feasible" if r["budget_feasible"] else "**infeasible**"
        plan += f", {len(r['budget_plan_strings'])} plans"
        cut = r["budget_measured"] / r["measured"] if r["measured"] else 0.0
        lines.append(
            f"| {r['model']} | {r['kind']} | {r['regions']} | {_grads(r)} "
            f"| {r['measured']:,} | {_n(r['predicted'])} | {_mark(r['exact'])} "
            f"| {r['measured_eager']:,} | {r['level1_measured']:,} | {plan} "
            f"| {r['budget_measured']:,} ({cut:.0%}) |"
        )
    return (
        f"Device {device}, size {size}, torch {torch.__version__}. Bytes are activation bytes "
        "saved for backward in one training step (unique storages; parameters, buffers and "
        "inputs left out).\n\n" + head + "\n".join(lines) + "\n"
    )


def write_table(path: Path, table: str, tag: str) -> None:
    """Put ``table`` between the ``<!-- zoo <tag> -->`` markers of ``path`` (the text
    around them is kept), or append a marked section."""
    begin, end = f"<!-- zoo {tag} -->", f"<!-- /zoo {tag} -->"
    text = path.read_text() if path.exists() else "# The zoo\n"
    block = f"{begin}\n{table}{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def _merged(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in place of the same models' rows of ``out`` when it holds a run at the same
    device, size, dtype and torch (a re-run of some models keeps the others' rows)."""
    if not out.exists():
        return rows
    old = json.loads(out.read_text())
    if any(old.get(k) != v for k, v in meta.items()):
        return rows
    new = {r["model"]: r for r in rows}
    kept = [new.pop(r["model"], r) for r in old.get("rows", [])]
    return kept + list(new.values())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="", help="comma-separated (default: the main zoo)")
    p.add_argument("--wide", action="store_true", help="the wide zoo (benchmarks/zoo_wide.py)")
    p.add_argument("--size", default="tiny", choices=("tiny", "gpu"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", default=str(ROOT / "docs" / "data"))
    p.add_argument("--markdown", default=str(ROOT / "docs" / "zoo.md"))
    p.add_argument("--jobs", type=int, default=1, help="models checked in parallel processes")
    a = p.parse_args(argv)
    names = [n for n in a.models.split(",") if n] or [m.name for m in (ZOO_WIDE if a.wide else ZOO)]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown zoo models {unknown}; have {', '.join(BY_NAME)}")
    if a.wide and a.size != "tiny":
        p.error("the wide zoo has tiny sizes only")
    rows = run(names, a.size, a.device, getattr(torch, a.dtype), a.jobs)
    dev = a.device.split(":")[0]
    # the main zoo's tiny sizes on a GPU apart from its realistic ones (zoo_cuda.json)
    tiny_gpu = "_tiny" if not a.wide and dev != "cpu" and a.size == "tiny" else ""
    tag = f"{'wide_' if a.wide else ''}{dev}{tiny_gpu}"
    out = Path(a.out) / f"zoo_{tag}.json"
    meta = {"device": a.device, "size": a.size, "dtype": a.dtype, "torch": torch.__version__}
    rows = _merged(out, meta, rows)
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    write_table(Path(a.markdown), markdown(rows, a.device, a.size), tag)
    print(f"wrote {out} and {a.markdown}")


if __name__ == "__main__":
    main()
