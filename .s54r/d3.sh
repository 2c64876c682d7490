# call 3: the CUDA-graph-unsafe offload ops (new GPU test, then the Llama budget under reduce-overhead), Mamba2 in fp32
set -o pipefail
ln -sfn ../passes memopt/passes
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MEMOPT_COMMIT=$(cat .s54r/commit)
mkdir -p $OUT/logs
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_offload_gpu.py -k "cuda_graphs or llama_bf16_bitwise" 2>&1 | grep -v DEBUG | tee $OUT/logs/gpu_cudagraphs_s54.log | tail -n 40
timeout 200 python .s54r/diag_mamba32.py 2>&1 | grep -v DEBUG | tee $OUT/logs/diag_mamba32_s54.log | grep -v "^\[transformers\]" | tail -n 12
for m in ${MODES:-reduce-overhead}; do
timeout ${T4:-200} python benchmarks/zoo_gpu.py --models llama --mode $m --points 0.5 --kinds compile,torch,budget --no-peers --parallel 3 --warmup 9 --iters 20 --suffix _s54b_$m --logs /tmp/zl_$m --out $OUT 2>&1 | tee $OUT/logs/zoo_gpu_s54b_$m.log | tail -n 12
done
