ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T1=$(date +%s)
timeout 260 python benchmarks/zoo_gpu.py --models whisper --points 0.1 --kinds compile,torch,budget --no-peers --parallel 9 --warmup 9 --iters 20 --deadline 200 --out $OUT --logs $OUT/logs/zoo --suffix _s66w > $OUT/logs/zoo_s66w.log 2>&1; echo "whisper rc=$? $(( $(date +%s)-T1 ))s"
T2=$(date +%s); LEFT=$(( 570 - (T2 - T1) ))
timeout $LEFT python benchmarks/zoo_gpu.py --models convnext --points 0.8,0.5 --kinds compile,torch,budget --no-peers --parallel 5 --warmup 9 --iters 20 --deadline $(( LEFT - 60 )) --out $OUT --logs $OUT/logs/zoo --suffix _s66c > $OUT/logs/zoo_s66c.log 2>&1; echo "convnext rc=$? $(( $(date +%s)-T2 ))s"
cd $OUT/logs/zoo 2>/dev/null && for f in *[^A-Za-z0-9._-]*; do [ -e "$f" ] && mv "$f" "$(echo "$f" | tr -c "A-Za-z0-9._\n-" _)"; done; cd - >/dev/null
python - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/zoo_gpu_*.json")):
    d = json.load(open(f))
    for r in d["rows"]:
        print(r.get("model"), r.get("variant"), round(r.get("ms") or 0, 2), round(r.get("gpu_ms") or 0, 2), r.get("peak"), r.get("predicted_peaks"), str(r.get("error", ""))[:200])
PY
tail -2 $OUT/logs/zoo_s66w.log $OUT/logs/zoo_s66c.log
