# call 1: device_overlap's held bytes, then the GPU tests not reached last session
set -o pipefail
ln -sfn ../passes memopt/passes
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MEMOPT_COMMIT=$(cat .s54r/commit)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python -c "import torch,transformers,timm;print(torch.__version__, transformers.__version__, timm.__version__)"
mkdir -p $OUT/logs
timeout 120 python .s54r/diag_overlap.py 2>&1 | tee $OUT/logs/diag_overlap_s54.log | tail -n 100
timeout ${T1:-420} python -m pytest -q -m gpu -p no:cacheprovider -rfE --durations=0 tests/test_step_gpu.py tests/test_offload_gpu.py 2>&1 | tee $OUT/logs/gpu_step_offload_s54.log | tail -n 60
