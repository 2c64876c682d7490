ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
T0=$(date +%s)
timeout 100 python docs/data/logs/s61/diag_made.py $OUT/diag_made_s62b.json resnet,llama > $OUT/logs/diag_made_s62b.log 2>&1; echo "diag rc=$? $(( $(date +%s)-T0 ))s"; grep -v arn $OUT/logs/diag_made_s62b.log | tail -n 2
T0=$(date +%s)
timeout 420 python benchmarks/zoo_gpu.py --models qwen2 --points 0.5,0.1 --kinds compile,torch,fused,budget --no-peers --ab fused:MEMOPT_FUSE_LOSS=1 --parallel 4 --warmup 5 --iters 10 --deadline 300 --out $OUT --logs $OUT/logs/zoo --suffix _s62 > $OUT/logs/zoo_qwen2_s62.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T0 ))s"
python - <<'PY'
import json, glob, os
for f in glob.glob(os.environ["OUT"] + "/zoo_gpu_qwen2*.json"):
    d = json.load(open(f))
    for r in d["rows"]:
        print(r["variant"], round(r.get("ms") or 0, 2), r.get("peak"), r.get("kernel_ms"), str(r.get("error", ""))[:200])
PY
