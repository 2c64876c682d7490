"""python make_table_b.py : results_b.json (sweep 6b) -> a markdown table (printed), with the
plan's rows at --batch 2 and --batch 3 side by side."""
import json, re
r = json.load(open("results_b.json"))


def chk(c):
    if c.get("skipped"):
        return "not run (cutoff)"
    if not c.get("ok", False) and "grads_match" not in c:
        return "**error**: " + (c.get("error") or str(c.get("rc")))[:80]
    s = "ok" if c.get("grads_match") else "**grads differ**"
    s += ", exact" if c.get("exact") else f", **not exact** ({c.get('predicted')} vs {c.get('measured')})"
    if c.get("budget_measured") is not None and c.get("measured"):
        s += f", {'feasible' if c.get('budget_feasible') else 'infeasible'} ({100*c['budget_measured']/c['measured']:.0f}%)"
    if not c.get("budget_grads_match", True):
        s += ", **budget grads differ**"
    return s


def off(o):
    if o.get("skipped"):
        return "not run (cutoff)"
    if not o.get("ok"):
        return "**error**: " + (o.get("error") or str(o.get("rc")))[:80]
    b = [x for x in o.get("offloaded_bytes") or [] if x]
    g = "grads = compile" if o.get("n_bad") == 0 and o.get("grad_keys_equal") else f"**{o.get('n_bad')} grads differ**"
    return f"{o.get('regions')} region(s), bytes {b or 'none'}, {g}"


def rows(p):
    out = p.get("stdout_tail", "")
    got = {}
    for k in ("gradients", "activations", "inputs", "total"):
        m = re.search(rf"^  {k}\s+(?:\S+ \S+\s+)?= ([^(\n]*)", out, re.M)
        if m:
            got[k] = m.group(1).strip()
    odd = sorted(set(re.findall(r"\b(?:s\d+|inputs_\w+|L_\w+|u\d+)\b", out)))
    return got, odd


def plan(p2, p3):
    if not p2 or p2.get("rc") is None:
        return "not run (cutoff)"
    if p2.get("rc") != 0:
        return f"**fails** rc={p2.get('rc')}"
    g2, odd2 = rows(p2)
    s = f"activations `{g2.get('activations')}`, inputs `{g2.get('inputs')}`"
    if p3 and p3.get("rc") == 0:
        g3, odd3 = rows(p3)
        same = g2 == g3
        s += "; batch 3: same formulas" if same else f"; **batch 3 differs**: activations `{g3.get('activations')}`, inputs `{g3.get('inputs')}`"
        odd2 = sorted(set(odd2) | set(odd3))
    elif p3:
        s += f"; batch 3: **fails** rc={p3.get('rc')}"
    if odd2:
        s += f", **odd symbols** {odd2}"
    return s


print("| model | class | check_model (level 1 vs compile; level-0 estimate; budget 0.5) | offload_layers=1, min bytes 0 | memopt plan (`--batch 2`; `--batch 3`) | s |")
print("|---|---|---|---|---|---|")
for k, v in r.items():
    print(f"| {k} | {v.get('class') or ''} | {chk(v.get('check', {}))} | "
          f"{off(v.get('offload', {}))} | {plan(v.get('plan'), v.get('plan3'))} | {v.get('seconds')} |")
