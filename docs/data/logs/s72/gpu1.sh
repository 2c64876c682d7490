# call 1: torch's budget 0.1 (with memopt at its peak, AdamW) twice, interleaved with memopt + StateSwap (priced by the step plan) at torch 0.5's and 0.1's peaks, then at 0.1's again
ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
python -c "import torch; print(torch.__version__)"
T0=$(date +%s)
run() {  # suffix, timeout, warmup, args...
  s=$1; t=$2; w=$3; shift 3
  OMP_NUM_THREADS=16 timeout $t torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "$@" --step-sync loss --warmup $w --iters 15 --memopt-log $OUT/logs/memopt_w1_s72$s.log --out $OUT/multi_gpu_steps_w1_s72$s.json > $OUT/logs/steps_w1_s72$s.log 2>&1; echo "fsdp $s rc=$? $(( $(date +%s)-T0 ))s"
  python - $OUT/multi_gpu_steps_w1_s72$s.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), round(r.get("wall_s") or 0), r.get("predicted_overhead_s"), r.get("overhead_floor_s"), r.get("error", "")[:300])
PY
  grep -n "Step plan:\|step plan: measured\|StateSwap\|waited\|declined" $OUT/logs/memopt_w1_s72$s.log | cut -c1-260 | tail -6
  tail -2 $OUT/logs/steps_w1_s72$s.log | cut -c1-300
}
run a 135 14 --only budgets --points 0.1 --optimizer adamw
run b 165 14 --only none --targets 0.5=9360502272,0.1=7614734848 --optimizer swap:auto:all
run c 135 14 --only budgets --points 0.1 --optimizer adamw
run d 125 14 --only none --targets 0.1=7614734848 --optimizer swap:auto:all
cd $OUT && tar czf logs.tgz logs && rm -rf logs
