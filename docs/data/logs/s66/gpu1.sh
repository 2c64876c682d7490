ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
OMP_NUM_THREADS=16 timeout 360 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets,auto --warmup 9 --iters 30 --memopt-log $OUT/logs/memopt_w1_s66a.log --out $OUT/multi_gpu_steps_w1_s66a.json > $OUT/logs/steps_w1_s66a.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python - $OUT/multi_gpu_steps_w1_s66a.json <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    ph = (r.get("phases_by_rank") or [{}])[0] or {}
    g = {k: round(st.median(v), 2) for k, v in ph.get("gpu_ms", {}).items()}
    print(r["key"], round(r.get("ms") or 0, 2), r.get("peak"), g, {k: v for k, v in ph.items() if k != "gpu_ms"}, r.get("error", "")[:200])
PY
grep -n "offloading the first\|Step plan:" $OUT/logs/memopt_w1_s66a.log | cut -c1-250 | tail -12
B=$(python -c "
import json,sys; d=json.load(open(sys.argv[1])); r={x['key']:x for x in d['rows']}
print(','.join(str(r[k]['peak']) for k in ('torch0.5','torch0.1') if r.get(k,{}).get('peak')))" $OUT/multi_gpu_steps_w1_s66a.json)
echo "budgets $B"
T1=$(date +%s); LEFT=$(( 560 - (T1 - T0) ))
[ -n "$B" ] && OMP_NUM_THREADS=16 timeout $LEFT torchrun --standalone --nproc-per-node 1 benchmarks/diag_step_choice.py --budgets $B --offload-auto --out $OUT/step_choice_s66.json > $OUT/logs/diag_s66.log 2>&1; echo "diag rc=$? $(( $(date +%s)-T1 ))s"
tail -5 $OUT/logs/diag_s66.log
