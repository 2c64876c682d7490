ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
T0=$(date +%s)
timeout 330 python benchmarks/zoo_gpu.py --models qwen2 --points 0.5,0.1 --kinds compile,torch,fused,budget --no-peers --ab fused:MEMOPT_FUSE_LOSS=1 --parallel 4 --warmup 5 --iters 10 --deadline 220 --out $OUT --logs $OUT/logs/zoo --suffix _s62b > $OUT/logs/zoo_qwen2_s62b.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T0 ))s"
cd $OUT/logs/zoo 2>/dev/null && for f in *; do mv "$f" "$(echo "$f" | tr -c 'A-Za-z0-9._\n-' '_')"; done; cd - >/dev/null
python - <<'PY'
import json, glob, os
for f in glob.glob(os.environ["OUT"] + "/zoo_gpu_qwen2*.json"):
    d = json.load(open(f))
    for r in d["rows"]:
        print(r["variant"], round(r.get("ms") or 0, 2), round(r.get("gpu_ms") or 0, 2), r.get("peak"), r.get("predicted_peak"), str(r.get("error", ""))[:200])
PY
T0=$(date +%s)
MEMOPT_FUSE_LOSS=1 OMP_NUM_THREADS=16 timeout 230 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only auto --targets 0.5=9360502272,0.1=7614734848 --warmup 9 --iters 20 --memopt-log $OUT/logs/memopt_w1_s62c.log --out $OUT/multi_gpu_steps_w1_s62c.json > $OUT/logs/steps_w1_s62c.log 2>&1; echo "fsdp rc=$? $(( $(date +%s)-T0 ))s"
python -c "
import json,sys; d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['key'], round(r.get('ms') or 0,2), r.get('peak'), (r.get('memopt') or [{}])[0].get('fused_losses') and 'fused', r.get('error','')[:200])" $OUT/multi_gpu_steps_w1_s62c.json
