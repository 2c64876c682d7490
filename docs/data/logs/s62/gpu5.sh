ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
T0=$(date +%s)
MEMOPT_FUSE_LOSS=1 OMP_NUM_THREADS=16 timeout 230 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only budgets,auto --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s62f.log --out $OUT/multi_gpu_steps_w1_s62f.json > $OUT/logs/steps_w1_s62f.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python -c "
import json,sys; d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['key'], round(r.get('ms') or 0,2), r.get('peak'), (r.get('memopt') or [{}])[0].get('fused_losses') and 'fused', r.get('error','')[:200])" $OUT/multi_gpu_steps_w1_s62f.json
