"""memopt plan on Mochi (sweep7_models.mochi: MochiTransformer3DModel, 2 blocks, hidden 32):
diffusers' MochiAttnProcessor2_0 loops over the batch and keeps the valid prompt tokens with
`torch.nonzero(mask)` (attention_processor.py:1068, a graph break: 11 regions). A later
region's token count (8, the same at every batch) is a fresh Dynamo symbol: at --batch 3 it is
printed raw (`inputs_hidden_states_dim1`, `inputs_hidden_states__base_dim1`, Note 2: =8); at
--batch 2 Note 2 lists only batch=2: `_names` (memopt/cli/analyze.py:124-127) named it
`4*batch` because 8 % 2 == 0. The --batch 2 formulas evaluated at batch 3 are not the
--batch 3 numbers either (plans frozen by the unrolled per-sample loop).

    python repro_plan_mochi_symbols.py      (from docs/data/sweep7, venv on; ~40 s)
"""
import os, re, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))


def plan(b):
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "memopt", "plan", "sweep7_models:mochi",
                        "--batch", str(b), "--device-kind", "cpu"], cwd=here, env=env,
                       capture_output=True, text=True)
    act = re.search(r"^\s+activations\s+[\d.]+ \S+\s+= (.*?)\s{2,}\(", p.stdout, re.M)
    note = re.search(r"Note 2: saving values use these symbol values: (.*?)\s*\(", p.stdout, re.S)
    assert act and note, p.stdout[-3000:] + p.stderr[-3000:]
    return act.group(1), " ".join(note.group(1).split())


if __name__ == "__main__":
    a2, n2 = plan(2)
    a3, n3 = plan(3)
    print(f"--batch 2: activations = {a2}   (symbol values: {n2})")
    print(f"--batch 3: activations = {a3}   (symbol values: {n3})")
    raw = sorted(set(re.findall(r"\b(?:s\d+|u\d+|inputs_\w+|L_\w+)\b", a3 + " " + a2)))
    assert not raw, f"BUG: raw symbols {raw} in the formulas (a size of 8 at every batch)"
