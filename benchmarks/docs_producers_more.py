"""The registry of docs/data, continued (benchmarks/docs_producers.py): the later sessions'
files; benchmarks/docs_numbers.py matches a file against both lists, in order."""

from __future__ import annotations

from benchmarks.docs_producers import PY, Producer

MORE: tuple[Producer, ...] = (
    Producer(
        "multi_gpu_steps_w1_2026-11-25.json",
        "torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --out docs/data/{file}",
        "gpu-x2",
        "GPU 0 of the two-GPU machine",
    ),
    Producer(
        "multi_gpu_params_w2_largest_2026-11-25.json",
        f"{PY}multi_gpu.py params --world 2 --jobs '' --largest memopt --largest-batches 6,8 "
        "--timeout 60 --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_params_w2_2026-11-25.json",
        f"{PY}multi_gpu.py params --world 2 --largest-batches 6 --timeout 150 "
        "--out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_params_w1_b4_2026-11-25.json",
        f"{PY}multi_gpu.py params --world 1 --jobs fsdp2:4x1024,memopt:4x1024 --largest '' "
        "--timeout 65 --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_params_w1_2026-11-25.json",
        f"{PY}multi_gpu.py params --world 1 --largest '' --timeout 120 --out docs/data/{{file}}",
        "gpu-x2",
        "cut by its time limit after the 2 x 512 jobs",
    ),
    Producer(
        "pcie_w2*.json",
        "torchrun --standalone --nproc-per-node 2 benchmarks/diag_pcie.py --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer("pareto_llama*.json", f"{PY}pareto.py llama --out docs/data/{{file}}", "gpu"),
    Producer(
        "pareto_gpt2_b32*.json", f"{PY}pareto.py gpt2 --batch 32 --out docs/data/{{file}}", "gpu"
    ),
    Producer("pareto_gpt2*.json", f"{PY}pareto.py gpt2 --out docs/data/{{file}}", "gpu"),
    Producer(
        "offload_llama8*.json",
        "CUBLAS_WORKSPACE_CONFIG=:4096:8 "
        f"{PY}offload.py --model llama --layers 8 --k 1,2 --stability-steps 12 "
        "--stability-k 2 --profile-steps 2 --out docs/data/{file}",
        "gpu",
    ),
    Producer(
        "offload_gpt6*.json",
        "CUBLAS_WORKSPACE_CONFIG=:4096:8 "
        f"{PY}offload.py --model gpt --layers 6 --hidden 2048 --heads 16 --k 1,2,3,4,5 "
        "--late 1 --stability-k 2 --profile-steps 2 --out docs/data/{file}",
        "gpu",
    ),
    Producer(
        "offload_llama.json",
        f"CUBLAS_WORKSPACE_CONFIG=:4096:8 {PY}offload.py --model llama --out docs/data/{{file}}",
        "gpu",
    ),
    Producer(
        "first_steps_*.json",
        f"{PY}first_steps.py --model vit --budgets 1.9e9,2.2e9 --out docs/data/{{file}}",
        "gpu",
        "old: PYTHONPATH=<git archive of the commit before>; see docs/zoo.md for each file",
    ),
    Producer(
        "clip_host*.json",
        f"PYTHONPATH=. {PY}clip_host.py --size 1b --out docs/data/{{file}}",
        "gpu",
        "the H100 machine's host CPU; no GPU used",
    ),
    Producer(
        "param_peers*.json",
        f"PYTHONPATH=. {PY}param_peers.py run --out docs/data/{{file}} --jobs ...",
        "gpu",
        "the jobs of each run are listed in its JSON and in docs/benchmarks.md",
    ),
    Producer(
        "param_cpu_adamw*.json",
        f"PYTHONPATH=. {PY}param_cpu_adamw.py all --out docs/data/{{file}}",
        "gpu",
    ),
    Producer(
        "largest_batch*.json",
        f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True {PY}largest_batch.py "
        "--variants memopt-budget,compile --no-guess --out docs/data/{file}",
        "gpu",
        "--start/--max-batch per run: docs/benchmarks.md",
    ),
    Producer(
        "plan_time_menu_*.json",
        f"{PY}plan_time.py --planner MODEL:2:2048 --budgets 0.5 --menu --out docs/data/{{file}}",
        "cpu",
        "MODEL from the name; _bb685be: PYTHONPATH=<git archive bb685be>, MEMOPT_COMMIT=bb685be",
    ),
    Producer("plan_time*.json", f"{PY}plan_time.py --models llama --out docs/data/{{file}}", "gpu"),
    Producer(
        "replan_time*.json",
        f"{PY}replan_time.py --out docs/data/{{file}}",
        "cpu",
        "_bb685be: PYTHONPATH=<git archive bb685be>, MEMOPT_COMMIT=bb685be",
    ),  # fmt: skip
    Producer(
        "freeze_check.json",
        f"{PY}freeze_check.py --budget 4928556544 --out docs/data/{{file}}",
        "gpu",
    ),
    Producer(
        "copy_interference*.json", f"{PY}copy_interference.py --out docs/data/{{file}}", "gpu"
    ),
    Producer(
        "diag_offload_gaps.json", f"{PY}diag_offload_cost.py --ks 1 --out docs/data/{{file}}", "gpu"
    ),
    Producer("diag_step_offload_v2_chunked.json", "(historical: chunked copies, reverted)", "gpu"),
    Producer(
        "diag_step_offload_w2*_s14.json",
        f"torchrun --nproc-per-node 2 {PY[7:]}diag_step_offload.py "
        "--variants compile,k1,k1:prehook,k1:nopace --waits --traces tr --out {file}",
        "gpu-x2",
    ),
    Producer(
        "diag_step_offload_w2*.json",
        f"torchrun --nproc-per-node 2 {PY[7:]}diag_step_offload.py --ks 1,2 --out {{file}}",
        "gpu",
    ),
    Producer(
        "diag_step_offload*_w1_s29.json",
        f"torchrun --standalone --nproc-per-node 1 {PY[7:]}diag_step_offload.py --variants "
        "compile,k1,k2 --out docs/data/{file} (_stack_: DIAG_STACK=1, --variants k1; one H200)",
        "gpu",
    ),
    Producer(
        "diag_step_offload*.json",
        f"{PY}diag_step_offload.py --ks 1,2 --out docs/data/{{file}}",
        "gpu",
    ),
    Producer(
        "diag_plan_kernels_*.json",
        f"{PY}diag_plan_kernels.py --model MODEL --variants ... --out docs/data/{{file}} "
        "(the variants are in each row; docs/zoo.md, thirteenth session, has the commands)",
        "gpu",
    ),
    Producer(
        "diag_liveness_*.json",
        f"{PY}diag_liveness.py --model MODEL --variants ... (one JSON line per run, listed)",
        "gpu",
        "the commands are in docs/zoo.md, seventeenth session",
    ),
    Producer(
        "diag_option_peak_*.json",
        f"{PY}diag_option_peak.py --model resnet --budget 3474163712 --out docs/data/{{file}}",
        "gpu",
        "docs/zoo.md, twenty-fifth session (``_fix``: after the solver's fix)",
    ),
    Producer("diag_tangents*.json", f"{PY}diag_tangents.py --device cuda", "gpu"),
    Producer(
        "zoo_*cuda*_s33.json",
        f"{PY}zoo.py [--wide] --device cuda --jobs 8 --out $OUT",
        "gpu",
        "docs/zoo.md, thirty-third session: tiny sizes on an H200, three runs merged by row "
        "(each row's run and commit; the rows in docs/data/logs/zoo_cuda_tiny_s33_*.jsonl)",
    ),
    Producer(
        "zoo_*cuda*_s34.json",
        f"{PY}zoo.py [--wide] --device cuda --jobs 6..8 --out $OUT",
        "gpu",
        "docs/zoo.md, thirty-fourth session: tiny sizes on an H200, LeViT and MobileNetV2 "
        "re-run with the widened gradient check (each row's run and commit; the rows in "
        "docs/data/logs/zoo_cuda_tiny_s34_*.jsonl)",
    ),
    Producer(
        "grads_*_s34.json",
        f"{PY}diag_grads.py --model MODEL --device cuda --out docs/data/{{file}}",
        "gpu",
    ),
    Producer(
        "collective_pcie_w2*.json",
        f"torchrun --nproc-per-node 2 {PY[7:]}diag_collective_pcie.py --out {{file}}",
        "gpu",
    ),
    Producer(
        "diag_steps_*.json",
        f"{PY}diag_step_times.py --model MODEL --variants compile,budget:BYTES --json {{file}}",
        "gpu",
    ),
    Producer(
        "prices_*.json",
        f"{PY}diag_prices.py --model MODEL --budget B --json {{file}}",
        "gpu",
        "docs/zoo.md, thirty-eighth session: prices_convnext_s38.json is the script's first "
        "version (nodes priced again after the compile); thirty-ninth session: the _s39 files "
        "timed kernels issued one by one (then the default), prices_convnext_queued_s39.json "
        "with MEMOPT_KERNEL_TIMING=queued (its kernel_timing key added from that command)",
    ),
    Producer(
        "gap_*_s43.json",
        f"{PY}diag_peak_gap.py --model MODEL --size gpu --device cuda --dtype bfloat16 "
        "--budget B --json {file}",
        "gpu",
        "docs/zoo.md, forty-third session (Inductor's GPU buffer plan against the model)",
    ),
    Producer(
        "peak_*_s4[34].json",
        f"{PY}diag_zoo_peak.py --model MODEL --budget B --warmup 5 --json {{file}}",
        "gpu",
        "docs/zoo.md, forty-third and forty-fourth sessions (its replay is not usable yet)",
    ),
    Producer(
        "guard_tight_*.json",
        f"{PY}diag_peak_gap.py --model MODEL --budget B --json ... (MEMOPT_FUSION_GUARD=0/1)",
        "cpu",
        "docs/zoo.md, thirty-seventh session: the fusion guard at tight budgets, tiny sizes",
    ),
    Producer(
        "section_cpu_auto_s37.json",
        "for m in <the section table's models over the model by > 3%>; do "
        "TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) MEMOPT_FUSION_GUARD=auto "
        "PYTHONPATH=<transformers 5.17.0>:. "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 0 --budget 0.5 "
        "--out docs/data/{file}; done",
        "cpu",
        "~20 min on 2 cores",
    ),
)
