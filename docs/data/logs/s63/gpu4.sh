ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
OMP_NUM_THREADS=16 timeout 230 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets,auto --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s63b.log --out $OUT/multi_gpu_steps_w1_s63b.json > $OUT/logs/steps_w1_s63b.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python -c "
import json,sys; d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['key'], round(r.get('ms') or 0,2), r.get('peak'), r.get('error','')[:200])" $OUT/multi_gpu_steps_w1_s63b.json
grep -n "region 2\] Inductor's buffer plan\|placed, by region" $OUT/logs/memopt_w1_s63b.log | head -3
T1=$(date +%s); LEFT=$(( 560 - (T1 - T0) ))
timeout $LEFT python benchmarks/zoo_gpu.py --models qwen2 --points 0.5,0.1 --kinds compile,torch,fused,budget --no-peers --parallel 5 --warmup 5 --iters 10 --deadline $(( LEFT - 140 )) --out $OUT --logs $OUT/logs/zoo --suffix _s63b > $OUT/logs/zoo_s63b.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T1 ))s"
cd $OUT/logs/zoo 2>/dev/null && for f in *[^A-Za-z0-9._-]*; do [ -e "$f" ] && mv "$f" "$(echo "$f" | tr -c "A-Za-z0-9._\n-" _)"; done; cd - >/dev/null
python - <<'PY'
import json, glob, os
for f in glob.glob(os.environ["OUT"] + "/zoo_gpu_*.json"):
    d = json.load(open(f))
    for r in d["rows"]:
        print(r["variant"], round(r.get("ms") or 0, 2), round(r.get("gpu_ms") or 0, 2), r.get("peak"), r.get("predicted_peak"), str(r.get("error", ""))[:200])
PY
tail -2 $OUT/logs/zoo_s63b.log
