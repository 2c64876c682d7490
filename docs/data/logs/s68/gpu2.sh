ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs/zoo
nvidia-smi --query-gpu=name --format=csv,noheader
git log --oneline -1 2>/dev/null
T0=$(date +%s)
timeout 560 python benchmarks/zoo_gpu.py --models whisper,bart --points 0.3,0.1 --kinds compile,torch,budget --no-peers --parallel 9 --warmup 9 --iters 20 --deadline 290 --out $OUT --logs $OUT/logs/zoo --suffix _s68w > $OUT/logs/zoo_s68w.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T0 ))s"
python - $OUT/zoo_gpu_whisper_s68w.json $OUT/zoo_gpu_bart_s68w.json <<'PY'
import json, sys
for f in sys.argv[1:]:
  for r in json.load(open(f))["rows"]:
    print(f[-20:], r["variant"], round(r.get("gpu_ms") or 0, 3), round(r.get("ms") or 0, 3), r.get("peak"), r.get("budget"), (r.get("error") or "")[:200])
PY
grep -H "Step plan" $OUT/logs/zoo/*.log | cut -c1-330 | tail -30
