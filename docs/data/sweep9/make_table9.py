"""python make_table9.py : results.json + plan_compare.json -> REPORT's table (printed)."""
import json, os
r = json.load(open("results.json"))
pc = json.load(open("plan_compare.json")) if os.path.exists("plan_compare.json") else {}
CLS = {l.split()[0]: l.split()[1] for l in open("logs/eager_all.txt") if len(l.split()) > 2
       and l.split()[2] == "loss"}


def yn(b):
    return "yes" if b else "**NO**"


def chk(c):
    if "grads_match" not in c:
        if c.get("rc") in (124, 137):
            return "**ran past 420 s** (no result)", "", "", ""
        return "**error** " + str(c.get("error") or c.get("rc") or c.get("skipped"))[:80], "", "", ""
    g = f"{yn(c['grads_match'] and c.get('budget_grads_match'))} ({c.get('max_rel_grad_error'):.1e})"
    e = f"{yn(c['exact'])} ({c['predicted']:,} / {c['measured']:,})"
    l1 = f"{yn(c['level1_predicted'] == c['level1_measured'])} ({c['level1_predicted']:,} / {c['level1_measured']:,})"
    b = (f"{yn(c['budget_predicted'] == c['budget_measured'])} ({c['budget_predicted']:,} / "
         f"{c['budget_measured']:,}, {'feasible' if c.get('budget_feasible') else 'infeasible'}, "
         f"{c['regions']} region(s), plain_graphs {c.get('plain_graphs')})")
    return g, e, l1, b


def off(o):
    if o.get("rc") in (124, 137):
        return "**ran past 420 s** (no result)"
    if not o.get("ok"):
        return "**error** " + str(o.get("error") or o.get("rc") or o.get("skipped"))[:80]
    tot = sum(b or 0 for b in o.get("offloaded_bytes") or [])
    stp = o.get("step_offloaded_bytes") or 0
    g = "grads = compile" if o.get("n_bad") == 0 and o.get("grad_keys_equal") else f"**{o.get('n_bad')} grads differ**"
    s = f"{tot:,} B in-graph" if tot else "0 B in-graph"
    if stp or o.get("step_offload_runs"):
        s += f", step offload runs {o.get('step_offload_runs')}: {stp:,} B"
    elif not tot:
        s = "**" + s + "**"
    return f"{g}, {s}"


def plan(name, v):
    p2, p3 = v.get("plan", {}), v.get("plan_b3", {})
    if p2.get("rc") != 0 or p3.get("rc") != 0:
        return f"**fails** rc={p2.get('rc')}/{p3.get('rc')}"
    c = pc.get(name, {})
    a = c.get("rows", {}).get("activations", {})
    s = f"`{a.get('b2')}` / `{a.get('b3')}`"
    if c.get("status") == "consistent":
        return s + ": scales"
    odd = sorted(set(c.get("odd_b2", [])) | set(c.get("odd_b3", [])))
    n = len(c.get("mismatch", []))
    return s + f": **{n} rows/plans differ**" + (f", raw symbols {odd}" if odd else "")


print("| model | class | grads = compile (L1, budget) | level-0 exact (pred / meas) | level 1 exact | budget 0.5 pred = meas | offload_layers=1, min bytes 0 | plan activations `--batch 2` / `--batch 3` | s |")
print("|---|---|---|---|---|---|---|---|---|")
for k, v in r.items():
    cls = v.get("class") or v.get("check", {}).get("class") or CLS.get(k, "")
    print(f"| {k} | {cls} | {' | '.join(chk(v.get('check', {})))} | {off(v.get('offload', {}))} | {plan(k, v)} | {v.get('seconds')} |")
