# call 2: Mamba2's bf16 bits, the device_overlap test at its fixed baseline, then the reduce-overhead budget on Llama
set -o pipefail
ln -sfn ../passes memopt/passes
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MEMOPT_COMMIT=$(cat .s54r/commit)
mkdir -p $OUT/logs
timeout 200 python .s54r/diag_mamba.py 2>&1 | grep -v DEBUG | tee $OUT/logs/diag_mamba_s54.log | tail -n 30
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_params_fsdp_cuda.py 2>&1 | tee $OUT/logs/gpu_params_fsdp_s54.log | tail -n 8
for m in ${MODES:-reduce-overhead}; do
timeout ${T4:-240} python benchmarks/zoo_gpu.py --models llama --mode $m --points 0.5 --kinds compile,torch,budget --no-peers --parallel 3 --warmup 9 --iters 20 --suffix _s54_$m --logs /tmp/zl_$m --out $OUT 2>&1 | tee $OUT/logs/zoo_gpu_s54_$m.log | tail -n 30
done
