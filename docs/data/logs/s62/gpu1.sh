ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
T0=$(date +%s)
timeout 120 python docs/data/logs/s61/diag_made.py $OUT/diag_made_s62.json resnet,llama > $OUT/logs/diag_made_s62.log 2>&1; echo "diag rc=$? $(( $(date +%s)-T0 ))s"; tail -n 3 $OUT/logs/diag_made_s62.log
T0=$(date +%s)
OMP_NUM_THREADS=16 timeout 200 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s62a.log --out $OUT/multi_gpu_steps_w1_s62a.json > $OUT/logs/steps_w1_s62a.log 2>&1; echo "a rc=$? $(( $(date +%s)-T0 ))s"
TG=$(python -c "
import json; d=json.load(open('$OUT/multi_gpu_steps_w1_s62a.json'))
print(','.join(f\"{r['key'][5:]}={r['peak']}\" for r in d['rows'] if r['key'] in ('torch0.5','torch0.1') and r.get('peak')))")
echo "targets $TG"
T0=$(date +%s)
OMP_NUM_THREADS=16 timeout 260 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only auto --optimizer device_overlap --targets $TG --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s62b.log --out $OUT/multi_gpu_steps_w1_s62b.json > $OUT/logs/steps_w1_s62b.log 2>&1; echo "b rc=$? $(( $(date +%s)-T0 ))s"
for f in $OUT/multi_gpu_steps_w1_s62*.json; do python -c "
import json,sys; d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['key'], round(r.get('ms') or 0,2), r.get('peak'), r.get('error','')[:200])" $f; done
