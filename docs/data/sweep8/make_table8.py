"""python make_table8.py : results.json + plan_compare.json -> REPORT's compact table (printed)."""
import json, os
r = json.load(open("results.json"))
pc = json.load(open("plan_compare.json")) if os.path.exists("plan_compare.json") else {}
BUG = {"musicgen": " (bug 1)", "deepseek_v2": " (peak moves inside the phase, item 4)",
       "falcon_h1": " (peak moves inside the phase, item 4)"}
OFF_NOTE = {"musicgen": "0 B in-graph; step offload of run 0: 0 B after 2 steps, 182,272 B/step from step 2 (item 3, logs/cmd_5.txt)",
            "sam": "**640 B** in-graph (layers = the 4 mask heads: bug 2)"}
CLS = {l.split()[0]: l.split()[1] for l in open("logs/eager_all.txt") if len(l.split()) > 2
       and l.split()[2] == "loss"}


def chk(c):
    if "grads_match" not in c:
        if c.get("rc") == 124:
            return "**ran past 240 s** (no result)"
        return "**error** " + str(c.get("error") or c.get("rc") or c.get("skipped"))[:60]
    g = "grads = compile" if c["grads_match"] and c.get("budget_grads_match") else "**grads differ**"
    e = "exact" if c["exact"] else f"**not exact** ({c['predicted']:,} vs {c['measured']:,})"
    l1 = "" if c["level1_predicted"] == c["level1_measured"] else f", L1 **{c['level1_predicted']:,} vs {c['level1_measured']:,}**"
    b = f"{'feasible' if c.get('budget_feasible') else 'infeasible'} ({100 * c['budget_measured'] / c['measured']:.0f}%)"
    return f"{g}, {e}{l1}, budget {b}, {c['regions']} region(s)"


def off(o):
    if o.get("rc") == 124:
        return "**ran past 240 s** (no result)"
    if not o.get("ok"):
        return "**error** " + str(o.get("error") or o.get("rc") or o.get("skipped"))[:60]
    tot = sum(b or 0 for b in o.get("offloaded_bytes") or [])
    stp = o.get("step_offloaded_bytes") or 0
    g = "grads = compile" if o.get("n_bad") == 0 and o.get("grad_keys_equal") else f"**{o.get('n_bad')} grads differ**"
    s = f"{tot:,} B in-graph" if tot else "0 B in-graph"
    if stp or o.get("step_offload_runs"):
        s += f", step offload runs {o.get('step_offload_runs')}: {stp:,} B"
    elif not tot:
        s = "**" + s + "**"
    s = OFF_NOTE.get(o.get("model"), s)
    return f"{s}, {g}"


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
    return s + f": **{n} rows/plans differ**" + (f", raw symbols {odd}" if odd else "") + BUG.get(name, "")


print("| model | class | check_model (level 1 vs compile; level-0 estimate; budget 0.5) | offload_layers=1, min bytes 0 | memopt plan activations `--batch 2` / `--batch 3` | s |")
print("|---|---|---|---|---|---|")
for k, v in r.items():
    cls = v.get("class") or v.get("check", {}).get("class") or CLS.get(k, "")
    print(f"| {k} | {cls} | {chk(v.get('check', {}))} | {off(v.get('offload', {}))} | {plan(k, v)} | {v.get('seconds')} |")
