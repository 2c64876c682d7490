ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "import torch; print(torch.__version__)"
T0=$(date +%s)
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_state_swap_cuda.py tests/test_params_grad_acc_cuda.py tests/test_params_fsdp_cuda.py > $OUT/logs/test_state_swap_cuda_s70.log 2>&1; echo "test rc=$? $(( $(date +%s)-T0 ))s"; grep -E "^E |passed|failed|Error" $OUT/logs/test_state_swap_cuda_s70.log | head -20
run() {  # suffix, timeout, args...
  s=$1; t=$2; shift 2
  OMP_NUM_THREADS=16 timeout $t torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "$@" --step-sync loss --warmup 9 --iters 15 --memopt-log $OUT/logs/memopt_w1_s70$s.log --out $OUT/multi_gpu_steps_w1_s70$s.json > $OUT/logs/steps_w1_s70$s.log 2>&1; echo "fsdp $s rc=$? $(( $(date +%s)-T0 ))s"
  python - $OUT/multi_gpu_steps_w1_s70$s.json <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    ph = (r.get("phases_by_rank") or [{}])[0] or {}
    g = {k: round(st.median(v), 2) for k, v in ph.get("gpu_ms", {}).items()}
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), round(r.get("wall_s") or 0), g, r.get("error", "")[:300])
PY
  grep -n "Step plan:\|step plan: measured\|StateSwap" $OUT/logs/memopt_w1_s70$s.log | cut -c1-240 | tail -6
  tail -3 $OUT/logs/steps_w1_s70$s.log | cut -c1-300
}
run k 180 --only none --targets 0.5=9360502272,0.1=7614734848 --optimizer swap:auto:all
run l 180 --only budgets --points 0.5,0.1 --optimizer adamw
cd $OUT && tar czf logs.tgz logs && rm -rf logs
