ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 45 python -m pytest -q -p no:cacheprovider tests/test_state_swap_cuda.py > $OUT/logs/test_state_swap_cuda_s68.log 2>&1; echo "test rc=$? $(( $(date +%s)-T0 ))s"; tail -3 $OUT/logs/test_state_swap_cuda_s68.log
OMP_NUM_THREADS=16 timeout 135 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only none --targets 0.1=7614734848 --optimizer swap:1000000000:4 --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s68s.log --out $OUT/multi_gpu_steps_w1_s68s.json > $OUT/logs/steps_w1_s68s.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python - $OUT/multi_gpu_steps_w1_s68s.json <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    ph = (r.get("phases_by_rank") or [{}])[0] or {}
    g = {k: round(st.median(v), 2) for k, v in ph.get("gpu_ms", {}).items()}
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), r.get("wall_s"), g, r.get("error", "")[:300])
PY
grep -n "Step plan:\|step plan: measured" $OUT/logs/memopt_w1_s68s.log | cut -c1-220 | tail -6
tail -5 $OUT/logs/steps_w1_s68s.log | cut -c1-300
