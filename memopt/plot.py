"""Pictures: a step's memory timeline, a CUDA memory snapshot, the benchmarks' Pareto front.

``memopt plot step REPORT.json [--snapshot SNAP.pickle] -o step.png`` draws the predicted live
bytes per op of one training step without memopt and with the plan (``memopt plan --timeline
--save-report REPORT.json``, or ``memopt plan ... --plot step.png`` directly), the memory the
plan frees shaded; with ``--snapshot`` a second panel shows the allocated bytes measured on a
GPU (``pickle.dump(torch.cuda.memory._snapshot(), f)`` after
``torch.cuda.memory._record_memory_history()``). ``memopt plot snapshot`` draws a snapshot
alone; ``memopt plot pareto`` the peak/step-time front of ``benchmarks/pareto.py`` JSON.

matplotlib is optional (``pip install memopt[plot]``); the data functions
(:func:`snapshot_curve`, :func:`pareto_groups`) need nothing but the standard library.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from memopt.errors import ConfigError

GIB = 2**30
INSTALL = "pip install memopt[plot]"


class PlotError(ConfigError):
    """A picture cannot be made: matplotlib is missing or the input is not what it should be."""


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only), or a :class:`PlotError` naming the
    extra to install."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError(f"memopt plot needs matplotlib: {INSTALL}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---- data ---------------------------------------------------------------------------------------
def snapshot_curve(snapshot: Mapping[str, Any], device: int = 0) -> tuple[list[float], list[int]]:
    """Allocated bytes before the trace and after each of its events, from a
    ``torch.cuda.memory._snapshot()``: ``(milliseconds since the first event, bytes)``. The bytes allocated before the trace
    began are recovered from the final state (the segments' ``active_allocated`` blocks) minus
    what the trace allocated and freed, as torch's memory viewer does."""
    try:
        traces = snapshot["device_traces"]
        trace = traces[device]
        segments = snapshot.get("segments", ())
    except (KeyError, IndexError, TypeError):
        raise PlotError(
            "not a CUDA memory snapshot: expected {'segments': [...], 'device_traces': "
            f"[[...]]}} with device {device} (torch.cuda.memory._snapshot())"
        ) from None
    final = sum(
        b["size"]
        for s in segments
        if s.get("device", device) == device
        for b in s.get("blocks", ())
        if b.get("state") == "active_allocated"
    )
    steps = []
    for e in trace:
        if e.get("action") == "alloc":
            steps.append((e.get("time_us", 0), e["size"]))
        elif e.get("action") == "free_completed":
            steps.append((e.get("time_us", 0), -e["size"]))
    if not steps:
        raise PlotError("the snapshot's trace has no alloc/free events (record the history first)")
    now = final - sum(d for _, d in steps)
    t0 = steps[0][0]
    times, curve = [0.0], [now]  # before the first event
    for t, d in steps:
        now += d
        times.append((t - t0) / 1e3)
        curve.append(now)
    return times, curve


def load_snapshot(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror}") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        raise PlotError(f"{path} is not a pickled memory snapshot ({e})") from None


def pareto_groups(data: Mapping[str, Any]) -> dict[str, list[tuple[float, float, str]]]:
    """``benchmarks/pareto.py`` rows as ``(peak GiB, step ms, label)`` per family
    (torch.compile and its budgets, memopt, the others), each sorted by peak."""
    try:
        rows = data["rows"]
        groups: dict[str, list[tuple[float, float, str]]] = {"torch.compile": [], "memopt": []}
        groups["other"] = []
        for r in rows:
            v = str(r["variant"])
            key = next((k for k in ("torch.compile", "memopt") if v.startswith(k)), "other")
            label = v.removeprefix(key).strip() or v
            groups[key].append((r["peak"] / GIB, float(r["ms"]), label))
    except (KeyError, TypeError) as e:
        raise PlotError(f"not benchmarks/pareto.py JSON (rows of variant, ms, peak): {e}") from None
    return {k: sorted(v) for k, v in groups.items() if v}


def _load_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise PlotError(f"{path} is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise PlotError(f"{path}: expected a JSON object")
    return data


def timeline_of(doc: Mapping[str, Any], path: str = "the report") -> dict[str, Any]:
    """The ``timeline`` of a ``memopt plan --timeline`` document (or a bare timeline)."""
    tl = doc.get("timeline", doc if "baseline" in doc else None)
    if not tl:
        raise PlotError(
            f"{path} has no timeline: write it with memopt plan MODEL --timeline "
            "--save-report REPORT.json (or draw at once with memopt plan MODEL --plot step.png)"
        )
    return dict(tl)


# ---- drawing ------------------------------------------------------------------------------------
def _unit(peak: int) -> tuple[str, int]:
    return ("GiB", GIB) if peak >= GIB else ("MiB", 2**20)


def _draw_step(ax: Any, tl: Mapping[str, Any]) -> None:
    name, unit = _unit(max(tl["baseline"]))
    x = range(len(tl["baseline"]))
    base = [b / unit for b in tl["baseline"]]
    plan = [b / unit for b in tl["planned"]]
    ax.plot(x, base, color="tab:gray", lw=1.2, label=f"without memopt: peak {max(base):.2f} {name}")
    ax.plot(x, plan, color="tab:blue", lw=1.2, label=f"with the plan: peak {max(plan):.2f} {name}")
    freed = [p < b for p, b in zip(plan, base)]
    ax.fill_between(x, plan, base, where=freed, color="tab:blue", alpha=0.15, label="freed")
    for peak, pos, color in (
        (tl["baseline_peak"], tl["baseline_peak_pos"], "tab:gray"),
        (tl["planned_peak"], tl["planned_peak_pos"], "tab:blue"),
    ):
        ax.plot([pos], [peak / unit], "v", color=color, ms=7)
    ax.axvline(tl["n_fwd"], color="black", lw=0.8, ls="--")
    ax.text(tl["n_fwd"], 0, " backward ->", va="bottom", fontsize=8)
    ax.text(tl["n_fwd"], 0, "<- forward ", va="bottom", ha="right", fontsize=8)
    for pos in (*tl.get("layer_fwd_start", ()), *tl.get("layer_bwd_start", ())):
        ax.axvline(pos, color="tab:gray", lw=0.3, alpha=0.5)
    ax.set_xlim(0, max(len(base) - 1, 1))
    ax.set_ylim(0, max(base) * 1.1)
    ax.set_xlabel("op of the step (forward, then backward); thin lines: layer starts")
    ax.set_ylabel(f"predicted live bytes ({name})")
    ax.set_title(
        f"one training step, predicted: {tl.get('label', '')}\n"
        "the budget planner's model: parameters, inputs, live tensors; no optimizer states\n"
        "(memopt plan's peak table adds those and estimates temporaries its own way)",
        fontsize=8,
    )
    ax.legend(fontsize=8, loc="upper left")


def _draw_measured(ax: Any, times: Sequence[float], curve: Sequence[int], title: str) -> None:
    name, unit = _unit(max(curve))
    ax.step(times, [c / unit for c in curve], where="post", color="tab:red", lw=1.0)
    peak = max(curve)
    ax.axhline(peak / unit, color="tab:red", lw=0.6, ls=":")
    ax.text(times[0], peak / unit, f" peak {peak / unit:.2f} {name}", va="bottom", fontsize=8)
    ax.set_ylim(0, peak / unit * 1.15)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(f"allocated ({name})")
    ax.set_title(title, fontsize=10)


def plot_step(
    timeline: Mapping[str, Any], out: str, snapshot: Mapping[str, Any] | None = None
) -> None:
    """Draw the predicted timeline (and the measured one from ``snapshot``) to ``out``."""
    plt = pyplot()
    rows = 2 if snapshot is not None else 1
    fig, axes = plt.subplots(rows, 1, figsize=(10, 4 * rows), squeeze=False)
    _draw_step(axes[0][0], timeline)
    if snapshot is not None:
        times, curve = snapshot_curve(snapshot)
        _draw_measured(axes[1][0], times, curve, "measured: CUDA memory snapshot")
    _save(fig, out)


def plot_snapshot(snapshot: Mapping[str, Any], out: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    times, curve = snapshot_curve(snapshot)
    _draw_measured(ax, times, curve, "allocated memory, CUDA memory snapshot")
    _save(fig, out)


def plot_pareto(datas: Sequence[Mapping[str, Any]], out: str) -> None:
    """One panel per benchmark file: step time against peak memory per variant."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(datas), figsize=(7 * len(datas), 5.5), squeeze=False)
    styles = {
        "torch.compile": ("o-", "tab:orange"),
        "memopt": ("s-", "tab:blue"),
        "other": ("^", "tab:gray"),
    }
    for ax, d in zip(axes[0], datas):
        for key, pts in pareto_groups(d).items():
            style, color = styles[key]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=key)
            # memopt's labels below-left, the others above-right, on three rows so that close
            # points stay legible
            ha, sx, sy = ("right", -5, -1) if key == "memopt" else ("left", 5, 1)
            for i, (x, y, label) in enumerate(pts):
                off = (sx, sy * (4 + 8 * (i % 3)))
                text = label.removeprefix("budget=") if key == "memopt" else label
                ax.annotate(text, (x, y), fontsize=6, xytext=off, textcoords="offset points", ha=ha)
        ax.set_title(_pareto_title(d), fontsize=9)
        ax.set_xlabel("peak memory (GiB)")
        ax.set_ylabel("step time (ms)")
        ax.margins(x=0.15, y=0.08)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, out)


def _pareto_title(d: Mapping[str, Any]) -> str:
    cfg = list(d.get("config") or [])
    if len(cfg) == 5:  # benchmarks/pareto.py CONFIGS: name, layers, hidden, batch, seq
        what = f"{cfg[0]}: {cfg[1]} layers, hidden {cfg[2]}, batch {cfg[3]} x seq {cfg[4]}"
    else:
        what = f"{d.get('model', '')} {cfg}"
    return f"{what}\n{d.get('device', '?')}, torch {d.get('torch', '?')}"


def _save(fig: Any, out: str) -> None:
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise PlotError(f"cannot write {out}: {e.strerror}") from None
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


# ---- command line -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memopt plot", description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="what", required=True, metavar="{step,snapshot,pareto}")
    step = sub.add_parser("step", help="a step's predicted memory, without memopt and planned")
    step.add_argument("report", metavar="REPORT.json", help="memopt plan --timeline --save-report")
    step.add_argument("--snapshot", metavar="SNAP.pickle", help="add the measured curve")
    snap = sub.add_parser("snapshot", help="allocated memory of a CUDA memory snapshot")
    snap.add_argument("snapshot", metavar="SNAP.pickle")
    par = sub.add_parser("pareto", help="peak memory against step time (benchmarks/pareto.py)")
    par.add_argument("data", nargs="+", metavar="DATA.json")
    for s, default in ((step, "step.png"), (snap, "snapshot.png"), (par, "pareto.png")):
        s.add_argument("-o", "--out", default=default, help=f"PNG to write (default {default})")
    return p


def main(argv: Sequence[str]) -> int:
    """``memopt plot step|snapshot|pareto ...``: the exit code (2 on bad input)."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    try:
        if args.what == "step":
            tl = timeline_of(_load_json(args.report), args.report)
            snap = load_snapshot(args.snapshot) if args.snapshot else None
            plot_step(tl, args.out, snap)
        elif args.what == "snapshot":
            plot_snapshot(load_snapshot(args.snapshot), args.out)
        else:
            plot_pareto([_load_json(p) for p in args.data], args.out)
    except PlotError as e:
        print(f"memopt plot: error: {e}", file=sys.stderr)
        return 2
    print(f"memopt plot: wrote {args.out}", file=sys.stderr)
    return 0
