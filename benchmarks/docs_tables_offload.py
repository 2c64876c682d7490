"""docs/benchmarks.md's activation-offload tables, rendered from benchmarks/offload.py and
diag_offload_cost.py JSON."""

from __future__ import annotations

from benchmarks.docs_fmt import gib, pct, size, table


def offload_rows(d: dict, prev: dict) -> str:
    """Activation offload at k layers, this run and [the previous run]."""
    base = {r["k"]: r for r in d["rows"]}
    old = {r["k"]: r for r in prev["rows"]}
    b0, o0 = base[0]["step_ms"], old[0]["step_ms"]
    rows = []
    for k, r in sorted(base.items()):
        o = old.get(k)
        if k == 0:
            step = f"{b0:.1f} [{o0:.1f}]"
            off = "0"
        else:
            step = f"{r['step_ms']:.1f}, {pct(r['step_ms'], b0)} [{o['step_ms']:.1f}, {pct(o['step_ms'], o0)}]"
            off = size(r["offloaded_bytes"])
            off += " [same]" if o and o["offloaded_bytes"] == r["offloaded_bytes"] else ""
        rows.append(
            (
                k,
                step,
                f"{gib(r['peak_bytes'], 3)} [{gib(o['peak_bytes'], 3)}]",
                off,
                "" if k == 0 else ("yes" if r.get("grads_bitwise_equal") else "no"),
            )
        )
    return table(("k", "step ms", "peak GiB", "offloaded", "grads bitwise"), rows)


def offload_sweep(d: dict, *, sync: bool = True, zero: bool = True, ms: bool = True) -> str:
    """``benchmarks/offload.py``'s rows (its ``report``): the forward budget is D2H bandwidth
    times the baseline's forward time; drop/offloaded is the peak's drop over the bytes moved."""
    base = d["rows"][0]
    budget = d["bandwidth"]["d2h"] * 1e9 * base["fwd_ms"] / 1e3
    rows = []
    for r in d["rows"] if zero else d["rows"][1:]:
        off = r["offloaded_bytes"]
        tr = r.get("trace", {}).get("d2h", {})
        if not off:
            cells = ["0", f"{gib(r['peak_bytes'])} GiB", "–", f"{r['step_ms']:.1f}", "–"]
            cells += ["–"] * 4
        else:
            grads = "yes"
            if not r.get("grads_bitwise_equal"):
                grads = f"no (max diff {r['grads_max_abs_diff']:.2e})"
            gbps = tr.get("gbps", 0.0)
            cells = [
                size(off),
                f"{gib(r['peak_bytes'])} GiB",
                f"{(base['peak_bytes'] - r['peak_bytes']) / off:.2f}",
                f"{r['step_ms']:.1f}",
                pct(r["step_ms"], base["step_ms"])[:-1],
                "yes" if off <= budget else "no",
                f"{gbps:.1f} ({gbps / d['bandwidth']['d2h']:.0%})" if gbps else "",
                f"{tr['overlap']:.0%}" if "overlap" in tr else "",
                grads,
            ]
        lead = [r["k"], r.get("sync", "default") if off else "–"] if sync else [r["k"]]
        if not ms:
            del cells[3]
        rows.append((*lead, *cells))
    heads = ("offloaded", "peak", "drop/offloaded", "step ms", "step +%", "fits budget")
    heads = heads if ms else tuple(h for h in heads if h != "step ms")
    heads += ("D2H GB/s (of memcpy)", "D2H overlap", "grads bitwise")
    return table((("k", "sync") if sync else ("k",)) + heads, rows)


def offload_gaps(d: dict) -> str:
    """``diag_offload_cost.py``: idle gaps of the compute stream blamed on the CPU or a wait."""
    labels = {
        "memopt budget=4928556544": "budget plan (torch 0.5's peak; {n} offloads)",
        "offload_layers=1": "offload_layers=1 ({n} offloads in layer 0)",
    }
    rows = []
    for r in d["rows"]:
        g = r["gaps"]
        ops = g["memopt_cpu_ops"]
        n = ops.get("memopt::offload", [0])[0]
        cpu = "-"
        if ops:
            waits = sum(
                ops.get(k, [0, 0])[1] for k in ("memopt::wait_reload", "memopt::wait_offload")
            )
            cpu = (
                f"offload {ops['memopt::offload'][1] / 1e3:.1f} ms, reload "
                f"{ops['memopt::reload'][1] / 1e3:.1f} ms, waits {waits / 1e3:.1f} ms"
            )
        rows.append(
            (
                labels.get(r["variant"], r["variant"]).format(n=n),
                f"{r['ms']:.1f}",
                f"{r['kernel_ms']:.1f}",
                f"{g['cpu_us'] / 1e3:.2f} ms",
                f"{g['wait_us'] / 1e3:.2f} ms" if g["wait_us"] else "0",
                cpu,
            )
        )
    heads = ("variant", "step ms", "kernel ms", "CPU-caused idle", "wait-caused idle")
    return table((*heads, "CPU time in memopt ops per step"), rows)


def offload_first(d: dict) -> str:
    """The first 4-layer sweep (``offload.py --model llama``): drop and copy overlap columns."""
    base = d["rows"][0]
    budget = d["bandwidth"]["d2h"] * 1e9 * base["fwd_ms"] / 1e3
    rows = []
    for r in d["rows"]:
        off, drop = r["offloaded_bytes"], base["peak_bytes"] - r["peak_bytes"]
        cells = [r["k"], size(off) if off else "0", f"{gib(r['peak_bytes'])} GiB"]
        cells.append(size(drop) if drop else "0")
        if not off:
            cells += ["–", f"{r['step_ms']:.1f}", "+0.0", "–", "–", "–"]
        else:
            tr = r["trace"]["d2h"]
            cells += [
                f"{drop / off:.2f}",
                f"{r['step_ms']:.1f}",
                pct(r["step_ms"], base["step_ms"])[:-1],
                "yes" if off <= budget else "no",
                f"{tr['gbps']:.1f} ({tr['gbps'] / d['bandwidth']['d2h']:.0%})",
                f"{tr['overlap']:.0%}",
            ]
        rows.append(cells)
    heads = ("k", "offloaded", "peak", "drop", "drop/offloaded", "step ms", "step +%")
    return table((*heads, "fits budget", "D2H GB/s (of memcpy)", "copy overlap"), rows)
