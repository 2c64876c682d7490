"""Why Inductor's backward peak differs from the budget planner's model, buffer by buffer.

One training step of a zoo model (CPU and fp32 unless ``--device``, ``--dtype``) under a budget, with two captures:

* Inductor's buffer plan of the backward (``memopt._torch_compat.inductor_plan._read``
  wrapped): every wrapper buffer with its bytes and FX origins (the post-grad nodes the
  kernel that writes it computes), replayed as :func:`memopt.inductor_buffers.step_peaks`
  does (saved inputs with their forward storage, tangents held, reuse pool counted);
* the planner's model (``build_planning_problem`` and ``solve`` wrapped): its non-candidate
  live items (``base_items``) and its candidates' intervals under the chosen decisions,
  positions in the baseline backward graph.

At Inductor's peak event it prints the storages live there (name, bytes, kind, origins), the
model's live set at the matching backward position (the allocating kernel's origins mapped to
the baseline backward by node name; the first baseline node at or after it in the applied
graph's order), and the difference, each storage classed by what its origins show (a
recompute, a post-grad ``addmm``, a fused reduction, a pool hold...). ``--at-model`` also
prints the same comparison at the model's own peak position::

    TORCHINDUCTOR_CACHE_DIR=/tmp/trace/c_falcon python benchmarks/diag_peak_gap.py \
        --model falcon --budget 0.5 [--size tiny] [--batch 0] [--json out.json]

A fresh Inductor cache directory per run (or none at all) is needed: a warm cache skips the
partitioner and generates no wrapper to read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CAP: dict = {"graphs": [], "planner": []}


def _install_hooks() -> None:
    from torch._inductor.virtualized import V

    from memopt._torch_compat import inductor_plan
    from memopt.passes import build_planning_problem as bpp
    from memopt.passes import plan_budget as pb

    read = inductor_plan._read

    def _read(wrapper):
        gb = read(wrapper)
        g, info = V.graph, {}
        order = {n.name: i for i, n in enumerate(g.module.graph.nodes)}
        for name, buf in g.name_to_buffer.items():
            try:
                origins = {o.name for o in buf.get_origins()}
            except Exception:
                origins = set()
            on = getattr(buf, "origin_node", None)
            info[name] = {
                "origins": sorted(origins, key=lambda x: order.get(x, -1)),
                "node": on.name if on is not None else None,
                "type": type(buf).__name__,
            }
        CAP["graphs"].append((gb, info, order))
        return gb

    inductor_plan._read = _read
    build = pb.build_planning_problem

    def build_wrapped(joint, fw, bw, analysis, **kw):
        problem = build(joint, fw, bw, analysis, **kw)
        usable = [a for a in analysis if a.cluster_id is not None or a.layer is not None]
        sizes = kw["sizes"]
        pad = kw.get("pad_matmuls", False)
        _, fi, bw_ops, bi = bpp.base_items(
            fw, bw, usable, sizes, pad_matmuls=pad, layout_copies=kw.get("layout_copies", ())
        )
        CAP["planner"].append(
            {
                "problem": problem,
                "fw_items": fi,
                "bw_items": bi,
                "members": {a.root: [a.root, *a.members] for a in usable},
                "bw_ops": [n.name for n in bw_ops],
            }
        )
        return problem

    pb.build_planning_problem = build_wrapped
    solve = pb.solve

    def solve_wrapped(problem, *a, **kw):
        sol = solve(problem, *a, **kw)
        for p in CAP["planner"]:
            if p["problem"] is problem:
                p["solution"] = sol
        return sol

    pb.solve = solve_wrapped


def inductor_live(fw, bw, info_bw, tangents_held: bool):
    """Replay as ``step_peaks`` does; returns (peak bytes, peak event, live storages there)
    with each storage's names (a storage made in the forward keeps its backward input name)."""
    from memopt import inductor_buffers as ib

    f = ib.replay(fw)
    made = {n: o for n, o in zip(fw.fx_outputs, f.outputs) if n is not None and o is not None}
    static = {n for n, o in zip(fw.fx_outputs, f.outputs) if n is not None and o is None}
    storage, size, refs, names, kind, held = {}, {}, {}, {}, {}, set()
    for name, nbytes in bw.inputs.items():
        if name in made:
            key, nb = made[name]
            kind[key] = "saved"
        elif name in static or name in fw.inputs:
            continue
        else:
            key, nb = ("input", name), nbytes
            kind[key] = "tangent (held)" if tangents_held else "tangent"
            if tangents_held:
                held.add(key)
        storage[name] = key
        size[key] = nb
        refs[key] = refs.get(key, 0) + 1
        names.setdefault(key, []).append(name)
    live = set(size)
    cur = sum(size.values())
    best, best_i, best_live = cur, -1, set(live)
    snap = {k: list(v) for k, v in names.items()}
    dead: set = set()
    best_pool: set = set()
    for i, ev in enumerate(bw.events):
        if ev.kind == "alloc":
            key = ("buf", i)
            while key in size:  # a saved input's forward key
                key = (*key, "+")
            storage[ev.name], size[key], refs[key], names[key] = key, ev.nbytes, 1, [ev.name]
            kind[key] = "extern out" if ev.kernel else "buffer"
            live.add(key)
            cur += ev.nbytes
        elif ev.kind == "alias":
            key = storage.get(ev.of)
            if key is None:
                continue
            storage[ev.name] = key
            refs[key] += 1
            names[key].append(ev.name)
        elif ev.kind == "pool":  # dead, its storage waits for its reuse: the name stays bound
            dead.add(ev.name)
        elif ev.kind == "free":
            key = storage.pop(ev.name, None)
            if key is None:
                continue
            refs[key] -= 1
            if refs[key] == 0 and key not in held:
                live.discard(key)
                cur -= size[key]
        if cur > best:
            best, best_i, best_live = cur, i, set(live)
            snap = {k: list(v) for k, v in names.items() if k in live}
            bound: dict = {}
            for n, k in storage.items():
                bound.setdefault(k, []).append(n)
            best_pool = {k for k, ns in bound.items() if all(n in dead for n in ns)}
    rows = []
    for key in best_live:
        nm = snap[key]  # the storage's names so far; the last is the buffer it holds now
        origins = info_bw.get(nm[-1], {}).get("origins", []) or [nm[-1]]
        k = kind[key] + (" [pool]" if key in best_pool else "")
        rows.append({"names": nm, "bytes": size[key], "kind": k, "origins": origins})
    rows.sort(key=lambda r: -r["bytes"])
    return best, best_i, rows


def model_live(plan, q: int):
    """The planner's model at baseline backward position ``q``: (total, rows)."""
    from memopt.plan import Strategy
    from memopt.planner import memory as pm

    problem, sol = plan["problem"], plan.get("solution")
    decisions = sol.decisions if sol is not None else {}
    tl = problem.timeline
    pos = tl.n_fwd + q
    rows = [
        {"name": it.name, "bytes": it.nbytes, "kind": it.kind}
        for it in plan["bw_items"]
        if it.start <= q <= it.end and it.nbytes
    ]
    rows.append({"name": "<static>", "bytes": tl.static_bytes, "kind": "static"})
    for c in problem.candidates:
        s = Strategy(decisions.get(c.name, Strategy.KEEP))
        for lo, hi, nb in pm.intervals(c, s, tl.n_fwd):
            if lo <= pos < hi:
                rows.append(
                    {
                        "name": c.name,
                        "bytes": nb,
                        "kind": f"candidate {pm.applied_strategy(c, s).name.lower()}",
                    }
                )
    for lo, hi, nb in pm.chain_intervals(problem, decisions):
        if lo <= pos < hi:
            rows.append({"name": "<chain>", "bytes": nb, "kind": "chain"})
    prof = pm.memory_profile(problem, decisions)
    rows.sort(key=lambda r: -r["bytes"])
    return sum(r["bytes"] for r in rows), rows, prof


def classify(row, model_names: set, fx_ops: dict, bw_base: set) -> str:
    """A storage's cause, from its origins (post-grad FX nodes)."""
    o = row["origins"]
    if "[pool]" in row["kind"]:
        return "reuse pool hold (dead, waiting for a same-size allocation)"
    if row["kind"].startswith("saved") or row["kind"].startswith("tangent"):
        return "saved/tangent the model does not hold here" if not set(o) & model_names else "-"
    targets = {fx_ops.get(x, "") for x in o}
    if any("addmm" in t for t in targets) and not any(x in bw_base for x in o if "addmm" in x):
        return "post-grad mm+add -> addmm"
    if not any(x in bw_base for x in o):
        return "recompute / node absent from the baseline backward"
    if any(t.split(".")[0].endswith(("sum", "mean", "amax", "var_mean")) for t in targets):
        return "reduction kernel (fused with pointwise producers)"
    return "kernel output the model fuses away or frees earlier"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="falcon")
    p.add_argument("--size", default="tiny")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cuda: Inductor's GPU buffer plan")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--budget", type=float, default=0.5, help="a fraction, bytes (> 1), 0: level 0")
    p.add_argument("--at-model", action="store_true", help="also compare at the model's peak")
    p.add_argument("--json", default=None, help="write the full comparison here")
    a = p.parse_args(argv)
    import torch

    import memopt
    from benchmarks.zoo import BY_NAME, build
    from benchmarks.zoo_models import step_loss
    from memopt import _torch_compat as compat
    from memopt import api
    from memopt import inductor_buffers as ib

    _install_hooks()
    m, x = build(BY_NAME[a.model], a.size, a.device, getattr(torch, a.dtype), a.batch or None)
    # 0: no recompute plan (level 0, a budget nothing needs: the planner still models it)
    kw = (
        {"budget": int(a.budget) if a.budget > 1 else a.budget}
        if a.budget
        else {"level": 0, "budget": 1 << 40}
    )
    c = memopt.optimize(m, **kw)
    step_loss(c(**x)).backward()
    region = api._STATES[c].regions[0]
    sec, planner = region.extra["inductor"], region.extra.get("planner") or {}
    fw, bw = ib.pair([g for g, _, _ in CAP["graphs"]])
    info_bw = next(i for g, i, _ in CAP["graphs"] if g is bw)
    order_bw = next(o for g, _, o in CAP["graphs"] if g is bw)
    held = compat.tangents_held_to_the_end()
    peak, ev_i, irows = inductor_live(fw, bw, info_bw, held)
    sp = ib.step_peaks(fw, bw, 0, tangents_held=held)
    if (sp.bwd.peak, sp.bwd.peak_event) != (peak, ev_i):  # the replay must be step_peaks'
        print(f"warning: replay {peak} at {ev_i}, step_peaks {sp.bwd.peak} at {sp.bwd.peak_event}")
    static = sec["static"]
    plan = CAP["planner"][-1]
    base_pos = {n: i for i, n in enumerate(plan["bw_ops"])}
    # the peak event's kernel: the buffer it allocates, its origins in applied-graph order
    ev = bw.events[ev_i]
    origins = info_bw.get(ev.name, {}).get("origins") or [ev.name]
    post = sorted(order_bw, key=order_bw.get)
    lo = hi = ev_i  # the allocations (and reuses) the peak's kernel makes before it runs
    while lo > 0 and bw.events[lo - 1].kind in ("alloc", "alias"):
        lo -= 1
    while hi + 1 < len(bw.events) and bw.events[hi + 1].kind in ("alloc", "alias"):
        hi += 1
    run = [e.name for e in bw.events[lo : hi + 1]]
    values = [(info_bw.get(n, {}).get("origins") or [n])[-1] for n in run]
    start = min((order_bw[v] for v in values if v in order_bw), default=0)
    match = next((n for n in post[start:] if n in base_pos), plan["bw_ops"][-1]) if post else None
    q = base_pos.get(match, len(plan["bw_ops"]) - 1)
    mtotal, mrows, prof = model_live(plan, q)
    model_names = {r["name"] for r in mrows}
    for cn in list(model_names):  # a candidate's members are its aliases
        model_names |= set(plan["members"].get(cn, ()))
    fx_ops = {n.name: str(n.target) for n in bw.module.graph.nodes}
    members = plan["members"]

    def held(r):  # the model holds this storage: its value node (or an input name) is live
        return r["origins"][-1] in model_names or bool(set(r["names"]) & model_names)

    extra = [r for r in irows if not held(r)]
    matched = {x for r in irows if held(r) for x in (r["origins"][-1], *r["names"])}
    missing = [
        r
        for r in mrows
        if r["kind"] != "static" and not set(members.get(r["name"], [r["name"]])) & matched
    ]
    groups: dict[str, int] = {}
    for r in extra:
        r["cause"] = classify(r, model_names, fx_ops, set(base_pos))
        groups[r["cause"]] = groups.get(r["cause"], 0) + r["bytes"]
    out = {
        "model": a.model,
        "budget": a.budget,
        "plan": planner.get("plan_strings"),
        "model_peak": planner.get("predicted_peak"),
        "model_curve_peak": prof.peak,
        "model_peak_pos": prof.peak_pos - prof.n_fwd,
        "model_peak_op": plan["bw_ops"][prof.peak_pos - prof.n_fwd]
        if prof.peak_pos >= prof.n_fwd
        else None,
        "inductor_bwd_peak": static + peak,
        "section_bwd_peak": sec["bwd_peak"],
        "peak_event": ev_i,
        "peak_buffer": ev.name,
        "peak_origins": origins,
        "matched_op": match,
        "matched_pos": q,
        "model_at_match": mtotal,
        "model_curve_at_match": prof.curve[prof.n_fwd + q],
        "gap": static + peak - (planner.get("predicted_peak") or 0),
        "gap_at_match": static + peak - mtotal,
        "extra_total": sum(r["bytes"] for r in extra),
        "missing_total": sum(r["bytes"] for r in missing),
        "extra_by_cause": groups,
        "inductor_live": irows,
        "model_live": mrows,
        "extra": extra,
        "missing": missing,
    }
    _print(out)
    if a.at_model and prof.peak_pos >= prof.n_fwd:
        _, rows, _ = model_live(plan, prof.peak_pos - prof.n_fwd)
        print(f"\nmodel's own peak at bw op {out['model_peak_op']} ({prof.peak} B):")
        for r in rows:
            print(f"  {r['bytes']:>9,}  {r['kind']:<22} {r['name']}")
    if a.json:
        from memopt.plan import Strategy
        from memopt.planner import memory as pm

        pr, sol = plan["problem"], plan.get("solution")
        dec = sol.decisions if sol is not None else {}
        out["raw"] = {
            "events": [[e.kind, e.name, e.nbytes, e.of, e.kernel] for e in bw.events],
            "buffers": info_bw,
            "inputs": dict(bw.inputs),
            "post_grad": [
                [n.name, n.op, str(n.target), [str(u) for u in n.all_input_nodes]]
                for n in bw.module.graph.nodes
            ],
            "fw_post_grad": [[n.name, n.op, str(n.target)] for n in fw.module.graph.nodes],
            "baseline_bw": plan["bw_ops"],
            "n_fwd": pr.timeline.n_fwd,
            "bw_items": [[i.name, i.start, i.end, i.nbytes, i.kind] for i in plan["bw_items"]],
            "candidates": [
                [
                    c.name,
                    pm.applied_strategy(c, Strategy(dec.get(c.name, 0))).name,
                    pm.intervals(c, Strategy(dec.get(c.name, 0)), pr.timeline.n_fwd),
                    plan["members"].get(c.name, []),
                ]
                for c in pr.candidates
            ],
            "chains": pm.chain_intervals(pr, dec),
            "static": pr.timeline.static_bytes,
            "curve": list(prof.curve),
        }
        Path(a.json).write_text(json.dumps(out, indent=1, default=str))


def _print(o: dict) -> None:
    print(
        f"{o['model']} budget {o['budget']}: model peak {o['model_peak']:,} B (bw op "
        f"{o['model_peak_op']}), Inductor backward peak {o['inductor_bwd_peak']:,} B "
        f"(section {o['section_bwd_peak']:,}); gap {o['gap']:+,} B"
    )
    print(
        f"Inductor peaks at event {o['peak_event']} allocating {o['peak_buffer']} "
        f"(origins {o['peak_origins'][-4:]}); matching model position: {o['matched_op']} "
        f"(#{o['matched_pos']}), model holds {o['model_at_match']:,} B there "
        f"(curve {o['model_curve_at_match']:,}); gap there {o['gap_at_match']:+,} B"
    )
    print("\nInductor live at its peak (bytes, kind, names, FX origins):")
    for r in o["inductor_live"]:
        print(
            f"  {r['bytes']:>9,}  {r['kind']:<16} {','.join(r['names'])[:40]:<40} "
            f"{' '.join(r['origins'][-6:])[:90]}"
        )
    print("\nmodel live at the matching position:")
    for r in o["model_live"]:
        print(f"  {r['bytes']:>9,}  {r['kind']:<22} {r['name']}")
    print(f"\nInductor holds, the model does not ({o['extra_total']:,} B):")
    for r in o["extra"]:
        print(
            f"  {r['bytes']:>9,}  {','.join(r['names'])[:30]:<30} {r['cause']}: "
            f"{' '.join(r['origins'][-5:])[:80]}"
        )
    print(f"\nthe model holds, Inductor does not ({o['missing_total']:,} B):")
    for r in o["missing"]:
        print(f"  {r['bytes']:>9,}  {r['kind']:<22} {r['name']}")
    print("\nby cause:", json.dumps(o["extra_by_cause"], indent=1))


if __name__ == "__main__":
    main()
