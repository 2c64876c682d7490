ln -sfn ../passes memopt/passes; export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
timeout 200 python benchmarks/diag_host_time.py --model convnext --budget 2083920384 --variants compile,budget --warmup 8 --iters 10 --out $OUT/host_time_convnext_s66.json > $OUT/logs/host_convnext.log 2>&1; echo "convnext rc=$? $(( $(date +%s)-T0 ))s"
grep -v "^\[\|Warn\|warn" $OUT/logs/host_convnext.log | cut -c1-220 | head -80
