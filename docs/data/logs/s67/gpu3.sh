ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
OMP_NUM_THREADS=16 timeout 400 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets,fused --warmup 9 --iters 30 --memopt-log $OUT/logs/memopt_w1_s67c.log --out $OUT/multi_gpu_steps_w1_s67c.json > $OUT/logs/steps_w1_s67c.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python - $OUT/multi_gpu_steps_w1_s67c.json <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    ph = (r.get("phases_by_rank") or [{}])[0] or {}
    g = {k: round(st.median(v), 2) for k, v in ph.get("gpu_ms", {}).items()}
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), g, ph.get("kernel_ms"), ph.get("kernel_ms_error"), r.get("error", "")[:300])
PY
grep -n "^Step plan:" $OUT/logs/memopt_w1_s67c.log | cut -c1-200
