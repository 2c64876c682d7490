ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs/zoo
nvidia-smi --query-gpu=name --format=csv,noheader
git log --oneline -1 2>/dev/null
T0=$(date +%s)
timeout 560 python benchmarks/zoo_gpu.py --models convnext --points 0.8,0.5,0.3,0.1 --kinds compile,torch,budget --no-peers --parallel 9 --warmup 9 --iters 20 --deadline 330 --out $OUT --logs $OUT/logs/zoo --suffix _s68c > $OUT/logs/zoo_s68c.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T0 ))s"
python - $OUT/zoo_gpu_convnext_s68c.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["variant"], round(r.get("gpu_ms") or 0, 3), round(r.get("ms") or 0, 3), r.get("peak"), r.get("budget"), (r.get("error") or "")[:200])
PY
grep -H "Step plan" $OUT/logs/zoo/*.log | cut -c1-330 | tail -30
