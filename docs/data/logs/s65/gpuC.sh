ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
OMP_NUM_THREADS=16 timeout 270 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets,auto --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s65a.log --out $OUT/multi_gpu_steps_w1_s65a.json > $OUT/logs/steps_w1_s65a.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python -c "
import json,sys; d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['key'], round(r.get('ms') or 0,2), r.get('peak'), r.get('error','')[:200])" $OUT/multi_gpu_steps_w1_s65a.json
grep -n "offloading the first\|Step plan:" $OUT/logs/memopt_w1_s65a.log | cut -c1-250 | tail -12
T1=$(date +%s); LEFT=$(( 500 - (T1 - T0) ))
timeout $LEFT python benchmarks/zoo_gpu.py --models bart --points 0.3,0.1 --kinds compile,torch,budget --no-peers --parallel 5 --warmup 5 --iters 10 --deadline $(( LEFT - 130 )) --out $OUT --logs $OUT/logs/zoo --suffix _s65a > $OUT/logs/zoo_s65a.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T1 ))s"
cd $OUT/logs/zoo 2>/dev/null && for f in *[^A-Za-z0-9._-]*; do [ -e "$f" ] && mv "$f" "$(echo "$f" | tr -c "A-Za-z0-9._\n-" _)"; done; cd - >/dev/null
python - <<'PY'
import json, glob, os
for f in glob.glob(os.environ["OUT"] + "/zoo_gpu_*.json"):
    d = json.load(open(f))
    for r in d["rows"]:
        print(r["model"], r["variant"], round(r.get("ms") or 0, 2), round(r.get("gpu_ms") or 0, 2), r.get("peak"), r.get("predicted_peaks"), str(r.get("error", ""))[:200])
PY
tail -2 $OUT/logs/zoo_s65a.log
