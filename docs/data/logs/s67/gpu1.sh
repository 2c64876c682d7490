ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 330 python benchmarks/diag_host_time.py --model convnext --budget 2083920384 --warmup 8 --iters 10 --out $OUT/host_time_convnext_s67.json > $OUT/logs/host_convnext_s67.log 2>&1; echo "convnext rc=$? $(( $(date +%s)-T0 ))s"
grep -v "^\[\|Warn\|warn" $OUT/logs/host_convnext_s67.log | cut -c1-200 | head -90
T1=$(date +%s)
OMP_NUM_THREADS=16 timeout $(( 580 - (T1 - T0) )) torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets --warmup 9 --iters 30 --memopt-log $OUT/logs/memopt_w1_s67a.log --out $OUT/multi_gpu_steps_w1_s67a.json > $OUT/logs/steps_w1_s67a.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T1 ))s"
python - $OUT/multi_gpu_steps_w1_s67a.json <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    ph = (r.get("phases_by_rank") or [{}])[0] or {}
    g = {k: round(st.median(v), 2) for k, v in ph.get("gpu_ms", {}).items()}
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), g, r.get("error", "")[:200])
PY
