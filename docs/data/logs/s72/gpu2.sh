# call 2: tests/test_state_swap_cuda.py, then Whisper at torch's 0.8 point (the zoo's one Whisper point not measured since the sixty-seventh session's recompute prices)
ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs/zoo
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 90 python -m pytest -q -p no:cacheprovider tests/test_state_swap_cuda.py > $OUT/logs/test_state_swap_cuda_s72.log 2>&1; echo "test rc=$? $(( $(date +%s)-T0 ))s"; tail -3 $OUT/logs/test_state_swap_cuda_s72.log
timeout 400 python benchmarks/zoo_gpu.py --models whisper --points 0.8 --kinds compile,torch,budget --no-peers --parallel 9 --warmup 9 --iters 20 --deadline 300 --out $OUT --logs $OUT/logs/zoo --suffix _s72w > $OUT/logs/zoo_s72w.log 2>&1; echo "zoo rc=$? $(( $(date +%s)-T0 ))s"
python - $OUT/zoo_gpu_whisper_s72w.json <<'PY'
import json, sys
for f in sys.argv[1:]:
  for r in json.load(open(f))["rows"]:
    print(f[-22:], r["variant"], round(r.get("gpu_ms") or 0, 3), round(r.get("ms") or 0, 3), r.get("peak"), r.get("budget"), (r.get("error") or "")[:200])
PY
grep -H "Step plan" $OUT/logs/zoo/*.log | cut -c1-330 | tail -4
cd $OUT && tar czf logs.tgz logs && rm -rf logs
