"""python plan_compare.py [NAME...] : for each model, `memopt plan` at --batch 2 and --batch 3
(logs/NAME_plan_b{2,3}.txt): evaluates every --batch 2 formula (peak rows and the plans'
`Saving Symbolic` column) at batch=3 and compares it with the --batch 3 formula at batch=3;
lists raw symbols (s0, inputs_..., L_..., u0) left in formulas. Writes plan_compare.json."""
import json, os, re, sys

import sympy

here = os.path.dirname(os.path.abspath(__file__))
ROWS = ("parameters", "gradients", "optimizer states", "activations", "temporaries", "inputs",
        "total")
ODD = re.compile(r"\b(?:s\d+|u\d+|inputs_\w+|L_\w+|unbacked\w*)\b")


def parse(path):
    if not os.path.exists(path):
        return None
    txt = open(path).read().split("--- stderr ---")[0]
    rows, plans = {}, {}
    for line in txt.splitlines():
        m = re.match(r"\s+(" + "|".join(ROWS) + r")\s+[\d.]+ \S+\s+= (.*?)(?:\s{2,}\(|$)", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
        m = re.match(r"- Plan \d+ : \S+ : (\S+)\s+(\d+)\s+([\d,]+)\s+(.+)$", line)
        if m:
            plans.setdefault(m.group(1), []).append(m.group(4).strip())
    m = re.search(r"^Predicted peak of one training step: .*?\(([\d,]+) B\), at (.*)$", txt, re.M)
    peak = (int(m.group(1).replace(",", "")), m.group(2).strip()) if m else (None, None)
    return {"rows": rows, "plans": plans, "peak": peak, "odd": sorted(set(ODD.findall(txt))),
            "raw": txt}


def ev(f, batch):
    try:
        e = sympy.sympify(f.replace(",", ""))
        return int(e.subs({sympy.Symbol("batch"): batch}))
    except Exception as ex:  # a raw symbol left: not evaluable
        return f"unevaluable ({type(ex).__name__}: {f})"


def compare(name):
    p2 = parse(os.path.join(here, "logs", f"{name}_plan_b2.txt"))
    p3 = parse(os.path.join(here, "logs", f"{name}_plan_b3.txt"))
    if not p2 or not p3 or not p2["rows"] or not p3["rows"]:
        return {"model": name, "status": "missing/failed plan"}
    out = {"model": name, "rows": {}, "mismatch": [], "odd_b2": p2["odd"], "odd_b3": p3["odd"]}
    for r in ROWS:
        f2, f3 = p2["rows"].get(r), p3["rows"].get(r)
        if f2 is None or f3 is None:
            continue
        a, b = ev(f2, 3), ev(f3, 3)
        out["rows"][r] = {"b2": f2, "b3": f3, "b2_at_3": a, "b3_at_3": b}
        if a != b:
            out["mismatch"].append(f"{r}: b2 formula {f2} -> {a} at batch 3; b3 formula {f3} -> {b}")
    for k in sorted(set(p2["plans"]) & set(p3["plans"])):
        for f2, f3 in zip(sorted(p2["plans"][k]), sorted(p3["plans"][k])):
            a, b = ev(f2, 3), ev(f3, 3)
            if a != b:
                out["mismatch"].append(f"plan {k}: b2 {f2} -> {a}; b3 {f3} -> {b}")
    out["plans_only_b2"] = sorted(set(p2["plans"]) - set(p3["plans"]))
    out["plans_only_b3"] = sorted(set(p3["plans"]) - set(p2["plans"]))
    out["peak_b2"], out["peak_b3"] = p2["peak"], p3["peak"]
    out["peak_moved"] = p2["peak"][1] != p3["peak"][1]
    out["status"] = "consistent" if not out["mismatch"] else "MISMATCH"
    return out


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(json.load(open(os.path.join(here, "results.json"))))
    res = {n: compare(n) for n in names}
    path = os.path.join(here, "plan_compare.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    old.update(res)
    json.dump(old, open(path, "w"), indent=1, default=str)
    for n, r in res.items():
        print(n, r["status"], "odd:", r.get("odd_b2"), r.get("odd_b3"), "peak:", r.get("peak_b2"), r.get("peak_b3"))
        for m in r.get("mismatch", [])[:12]:
            print("   ", m)
        if r.get("plans_only_b2") or r.get("plans_only_b3"):
            print("    plans only at b2:", r["plans_only_b2"][:5], "only at b3:", r["plans_only_b3"][:5])
