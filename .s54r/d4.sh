set -o pipefail
ln -sfn ../passes memopt/passes
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
timeout 100 python -m pytest -q -x -m gpu -p no:cacheprovider -rfE tests/test_offload_gpu.py -k "cuda_graphs" 2>&1 | grep -v DEBUG | tee $OUT/logs/gpu_cudagraphs_s54b.log | tail -n 30
timeout 170 python benchmarks/zoo_gpu.py --models llama --mode reduce-overhead --points 0.5 --kinds compile,budget --no-peers --parallel 2 --warmup 9 --iters 20 --suffix _s54c --logs /tmp/zl_c --out $OUT 2>&1 | tee $OUT/logs/zoo_gpu_s54c.log | tail -n 6
