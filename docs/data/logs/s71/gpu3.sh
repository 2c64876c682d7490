# call 3: call 2 again (torch's budgets with memopt at their peaks; the swap run)
ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "import torch; print(torch.__version__)"
T0=$(date +%s)
run() {  # suffix, timeout, warmup, args...
  s=$1; t=$2; w=$3; shift 3
  MEMOPT_BENCH_PROFILE_TABLE=$OUT/logs/profile_s71$s.txt OMP_NUM_THREADS=16 timeout $t torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "$@" --step-sync loss --warmup $w --iters 15 --memopt-log $OUT/logs/memopt_w1_s71$s.log --out $OUT/multi_gpu_steps_w1_s71$s.json > $OUT/logs/steps_w1_s71$s.log 2>&1; echo "fsdp $s rc=$? $(( $(date +%s)-T0 ))s"
  python - $OUT/multi_gpu_steps_w1_s71$s.json <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    ph = (r.get("phases_by_rank") or [{}])[0] or {}
    g = {k: round(st.median(v), 2) for k, v in ph.get("gpu_ms", {}).items()}
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), round(r.get("wall_s") or 0), g, ph.get("kernel_ms"), r.get("predicted_overhead_s"), r.get("overhead_floor_s"), r.get("error", "")[:300])
PY
  grep -n "Step plan:\|step plan: measured\|StateSwap\|waited" $OUT/logs/memopt_w1_s71$s.log | cut -c1-260 | tail -8
  tail -2 $OUT/logs/steps_w1_s71$s.log | cut -c1-300
}
run e 300 14 --only budgets --points 0.5,0.1 --optimizer adamw
run f 200 14 --only none --targets 0.5=9360502272,0.1=7614734848 --optimizer swap:auto:all
cd $OUT && tar czf logs.tgz logs && rm -rf logs
