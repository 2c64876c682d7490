"""python make_table.py : results.json -> a markdown table (printed)."""
import json, re
r = json.load(open("results.json"))
import os
pc = json.load(open("plan_compare.json")) if os.path.exists("plan_compare.json") else {}


def chk(c):
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
    if not o.get("ok"):
        return "**error**: " + (o.get("error") or str(o.get("rc")))[:80]
    b = o.get("offloaded_bytes")
    g = "grads = compile" if o.get("n_bad") == 0 and o.get("grad_keys_equal") else f"**{o.get('n_bad')} grads differ**"
    return f"{o.get('regions')} region(s), bytes {b}, {g}"


def plan(p):
    if p.get("rc") != 0:
        return f"**fails** rc={p.get('rc')}"
    out = p.get("stdout_tail", "")
    odd = sorted(set(re.findall(r"\b(?:s\d+|inputs_\w+|L_\w+|u\d+)\b", out)))
    m = re.search(r"activations\s+\S+ \S+\s+= ([^(]*)", out)
    s = "ok"
    if m:
        s += f", activations `{m.group(1).strip()}`"
    if odd:
        s += f", **odd symbols** {odd}"
    return s


def b3(name):
    c = pc.get(name)
    if not c:
        return "not compared"
    if c.get("status") != "consistent" and c.get("status") != "MISMATCH":
        return c.get("status")
    s = "consistent" if c["status"] == "consistent" else "**MISMATCH** " + "; ".join(c["mismatch"][:2])
    odd = sorted(set(c.get("odd_b2", [])) | set(c.get("odd_b3", [])))
    return s + (f", **raw symbols** {odd}" if odd else "")


print("| model | class | check_model | offload_layers=1, min bytes 0 | memopt plan --batch 2 | b2 formulas at batch 3 vs --batch 3 | s |")
print("|---|---|---|---|---|---|---|")
for k, v in r.items():
    print(f"| {k} | {v.get('class') or v.get('offload', {}).get('cls', '')} | {chk(v.get('check', {}))} | "
          f"{off(v.get('offload', {}))} | {plan(v.get('plan', {}))} | {b3(k)} | {v.get('seconds')} |")
