"""The registry of docs/data: for each data file pattern, the command that writes it and where
it runs (benchmarks/docs_numbers.py checks that every data file has one, ``--list`` prints
them and ``--run cpu`` re-runs the CPU ones)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Producer:
    """How the data files matching ``pattern`` (a glob under docs/data) are made."""

    pattern: str
    command: str  # run from the repository root; ``{file}`` is the data file's name
    device: str  # "cpu": runs here (``--run cpu``); "gpu": the H100 machine; "gpu-x2": two H100s
    note: str = ""


PY = "python benchmarks/"
PRODUCERS: tuple[Producer, ...] = (
    # CPU: re-run by --run cpu
    Producer("readme_demo.json", f"{PY}docs_cpu.py demo --out docs/data/{{file}}", "cpu"),
    Producer("cli_timings.json", f"{PY}docs_cpu.py cli --out docs/data/{{file}}", "cpu"),
    Producer(
        "ci_run.json",
        f"{PY}docs_cpu.py ci --out docs/data/{{file}}",
        "cpu",
        "~20 min on 2 cores: .ci/run on a clean clone in a fresh venv, then the quick subset",
    ),
    Producer("first_hour.json", f"{PY}docs_cpu.py first-hour --out docs/data/{{file}}", "cpu"),
    Producer("zoo_cpu.json", f"{PY}zoo.py", "cpu", "~17 min on 2 cores"),
    Producer("zoo_wide_cpu.json", f"{PY}zoo.py --wide", "cpu", "~40 min on 2 cores"),
    Producer("zoo_dynamic_cpu.json", f"{PY}zoo_dynamic.py", "cpu", "~90 min on 2 cores"),
    Producer(
        "section_cpu_inplace_s30.json",
        f"{PY}diag_section_cpu.py --model M --size tiny --batch 4 --budget 0.5 (M: wav2vec2 on "
        "main; wav2vec2, llama, bert, resnet with memopt.memory_rules.in_place_reader not "
        "blocked by a reduction its last reader depends on, an experiment not landed; the JSON "
        "lines gathered by hand)",
        "cpu",
    ),
    Producer(
        "section_cpu_all_s35.json",
        "for m in <the zoo's and the wide zoo's models but timm_vit and mamba>; do "
        "TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) PYTHONPATH=<transformers 5.17.0>:. "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 0 --budget 0.5 "
        "--out docs/data/{file}; done",
        "cpu",
        "~30 min on 2 cores (two lists at once)",
    ),
    Producer(
        "kernel_signatures_tiny.json",
        f"{PY}diag_kernel_signatures.py --out docs/data/{{file}}",
        "cpu",
        "~30 s on 2 cores",
    ),
    Producer(
        "kernel_signatures_gpu.json",
        f"{PY}diag_kernel_signatures.py --size gpu --dtype bfloat16 --out docs/data/{{file}}",
        "cpu",
        "~12 min on 2 cores: the GPU zoo's sizes traced with fake tensors, reductions timed on "
        "the CPU",
    ),
    Producer(
        "section_cpu_fusion_s2*.json",
        f"rm -f docs/data/{{file}}; for m in llama bert vit; do for b in 0.5 0.1; do for g in 0 1; "
        f"do MEMOPT_FUSION_GUARD=$g {PY}diag_section_cpu.py --model $m --size tiny --batch 4 "
        f"--budget $b --out docs/data/{{file}}; done; done; done",
        "cpu",
        "~10 min on 2 cores",
    ),
    Producer(
        "section_cuda_zoo_s28.json",
        "for m in t5 resnet wav2vec2 bert roberta phi3 gemma2 convnext llama vit; do echo $m; "
        "done | xargs -P 5 -I{} sh -c 'TORCHINDUCTOR_CACHE_DIR=/tmp/ci_{} "
        "MEMOPT_CACHE_DIR=/tmp/cm_{} timeout 200 python benchmarks/diag_section_cpu.py --model {} "
        "--size tiny --batch 4 --budget 0.5 --device cuda --out $OUT/sec/{}.json'; "
        "cat $OUT/sec/*.json > docs/data/{file}",
        "gpu",
        "one H200, five processes at once (no timing is read)",
    ),
    Producer(
        "diag_fsdp_section_cuda_*_s28.json",
        f"{PY}diag_fsdp_section.py --device cuda --layers 2 --hidden 2048 --heads 32 --kv 8 "
        "--ffn 8192 --vocab 32000 --batch 4 --seq 2048 --steps 4 --budget B --out docs/data/{file} "
        "(_keep: --budget 1.0 --steps 2; _03: --budget 0.3; _03g: the same with "
        "MEMOPT_FUSION_GUARD=1)",
        "gpu",
        "one H200 (_keep), one H100 (_03, _03g)",
    ),
    Producer(
        "section_cpu_zoo_s28.json",
        f"rm -f docs/data/{{file}}; for m in llama qwen2 mistral gemma2 phi3 bert t5 vit resnet "
        f"whisper; do TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) MEMOPT_CACHE_DIR=$(mktemp -d) "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 4 --budget 0.5 "
        f"--out docs/data/{{file}}; done",
        "cpu",
        "~12 min on 2 cores (the fused-recompute charge; two at a time here)",
    ),
    Producer(
        "section_cpu_reorder_s31.json",
        f"rm -f docs/data/{{file}}; for m in t5 bert gemma2 llama phi3 qwen2 resnet vit whisper; "
        f"do for s in reorder_for_peak_memory=False reorder_for_peak_memory=True; do "
        f"TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) MEMOPT_CACHE_DIR=$(mktemp -d) "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 4 --budget 0.5 --inductor $s "
        f"--out docs/data/{{file}}; done; done",
        "cpu",
        "~25 min on 2 cores; the rows were made by the same run() under a wrapper that set the "
        "config, before --inductor existed, and kept only the peaks",
    ),
    Producer(
        "section_cpu_zoo_guard_s*.json",
        f"rm -f docs/data/{{file}}; for m in phi3 t5 resnet gemma2 convnext roberta; do "
        f"MEMOPT_FUSION_GUARD=1 TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) MEMOPT_CACHE_DIR=$(mktemp -d) "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 4 --budget 0.5 "
        f"--out docs/data/{{file}}; done",
        "cpu",
        "~8 min on 2 cores",
    ),
    Producer(
        "section_cpu_wide_s*.json",
        f"rm -f docs/data/{{file}}; for m in falcon opt bloom gpt2 gemma3 mamba deberta_v2 deit "
        f"levit mobilenet_v2 efficientnet regnet unet2d vae flux; do "
        f"TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) MEMOPT_CACHE_DIR=$(mktemp -d) "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 0 --budget 0.5 "
        f"--out docs/data/{{file}}; done",
        "cpu",
        "~15 min on 2 cores (the wide zoo, one model per process; _s33 adds bert and t5 and "
        "the peak without Inductor's reuse pool)",
    ),
    Producer(
        "section_cpu_zoo_s*.json",
        f"rm -f docs/data/{{file}}; for m in llama qwen2 mistral gemma2 phi3 mixtral qwen2_moe "
        f"bert roberta t5 bart vit resnet convnext swin dit sd3 whisper wav2vec2 timm_vit; do "
        f"TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) MEMOPT_CACHE_DIR=$(mktemp -d) "
        f"{PY}diag_section_cpu.py --model $m --size tiny --batch 4 --budget 0.5 "
        f"--out docs/data/{{file}}; done",
        "cpu",
        "~30 min on 2 cores (one model per process; a fresh Inductor cache for each)",
    ),
    Producer(
        "section_cpu_*.json",
        f"rm -f docs/data/{{file}}; for b in 0.8 0.4; do {PY}diag_section_cpu.py --model resnet "
        f"--batch 16 --budget $b --out docs/data/{{file}}; done",
        "cpu",
        "~4 min a budget on 2 cores",
    ),
    Producer(
        "torch_versions_*.json",
        "bash .ci/torch_versions 2.11.0 2.14.1 && cp /tmp/memopt-torch-versions/torch_versions.json "
        "docs/data/{file}",
        "cpu",
        "~15 min on 2 cores; installs torch (PyPI's default build) in fresh venvs",
    ),
    # GPU (the commands docs/benchmarks.md names next to each table)
    Producer("zoo_cuda.json", f"{PY}zoo.py --device cuda --size gpu --dtype bfloat16", "gpu"),
    Producer(
        "zoo_gpu_*.json",
        f"{PY}zoo_gpu.py --models MODEL --out docs/data",
        "gpu",
        "resumed runs: --resume docs/data --again (torch.compile timed again beside the rows added)",
    ),
    Producer(
        "fsdp_step_budgets*_s22.json",
        f"torchrun --nproc-per-node 1 {PY}fsdp_step.py --only budgets --warmup 9 "
        "--out docs/data/{file}",
        "gpu",
        "_old_: PYTHONPATH=<git archive of d1ecff3> (before the Inductor check)",
    ),
    Producer(
        "fsdp_step_2026-11-25_per_run.json", f"{PY}fsdp_step.py --out docs/data/{{file}}", "gpu"
    ),
    Producer(
        "fsdp_step_2026-11-25_budgets_warmup9.json",
        f"{PY}fsdp_step.py --warmup 9 --only budgets --out docs/data/{{file}}",
        "gpu",
    ),
    Producer(
        "fsdp_step_2026-11-25_s8.json",
        f"{PY}fsdp_step.py --only budgets,level,offload --out docs/data/{{file}}",
        "gpu",
        "at 9e42eac^ (the step offload model without the copies to the host)",
    ),
    Producer(
        "fsdp_step_2026-11-25_s8_budgets.json",
        f"{PY}fsdp_step.py --only budgets --out docs/data/{{file}}",
        "gpu",
        "at 43bc8a4 (step-plan offload on by default then)",
    ),
    Producer(
        "fsdp_step_2026-11-25_s8_ab.json",
        f"{PY}fsdp_step.py --only budgets --recompute-only-too --out docs/data/{{file}}",
        "gpu",
        "at 0d6a697 (step-plan offload on by default then; 'no offload' rows are today's default)",
    ),
    Producer(
        "fsdp_step_2026-11-25_s9.json",
        f"{PY}fsdp_step.py --only budgets,level --warmup 9 --snapshot memopt "
        "--out docs/data/{file}",
        "gpu",
        "at 51a4071 (the peak probe, the 0.5% margin)",
    ),
    Producer(
        "fsdp_step_2026-11-25_s9_first.json",
        f"{PY}fsdp_step.py --only budgets --warmup 9 --out docs/data/{{file}}",
        "gpu",
        "at e2e8fdc (the peak probe, the 2.5% reserve)",
    ),
    Producer(
        "fsdp_step_2026-11-25_s9_reuse.json",
        f"{PY}fsdp_step.py --only budgets --warmup 9 --out docs/data/{{file}}",
        "gpu",
        "at 6c37006 (the logits' own cluster, the planner's in-place reuse)",
    ),
    Producer("fsdp_step*.json", f"{PY}fsdp_step.py --out docs/data/{{file}}", "gpu"),
    Producer(
        "kernels_*.json",
        "MEMOPT_CACHE_DIR=$OUT/cache (any budget or offload run on the GPU), then "
        "cp $OUT/cache/rates/kernels-*.json docs/data/{file}",
        "gpu",
        "memopt's kernel-time cache of the run named in docs/planner.md / docs/zoo.md",
    ),
    Producer(
        "diag_vit_offload*.json",
        f"{PY}diag_zoo_offload.py --model vit "
        "--variants compile,offload=1,budget=4221106688,budget_noffload=4221106688 "
        "--out docs/data/{file}",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w2_2026-11-25.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_s14*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only offload,budgets --out docs/data/{file} (_s14: --only offload, before the store "
        "fix; _s14b: after it)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_att_s15.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --memopt-log memopt_w2_s15.log --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_s16*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --memopt-log memopt_w2_s16a.log --out docs/data/{file} (twice: "
        "_s16a, _s16b)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_s18*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --memopt-log memopt_w2_s18.log --out docs/data/{file} (_s18: "
        "finer step options, two H200s; _s18b: a tried variant that priced compiled options "
        "at their Inductor peaks, not kept)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_s28.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets,level,offload,auto --warmup 9 --iters 30 --memopt-log memopt_w2_s28.log "
        "--out docs/data/{file} (two H100s; before the compile_end row existed)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w1_s29.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,level,offload,auto --warmup 9 --iters 30 --memopt-log memopt_w1_s29.log "
        "--out docs/data/{file} (one H200, code 5cebeaf)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s30*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto --warmup 9 --iters 30 --memopt-log memopt_w1_s30a.log --out "
        "docs/data/{file} (one H200; a: code 15ef625, b: 8c07eac, c: 5083cfd)",
        "gpu",
    ),
    Producer(
        "step_memory*_s30.json",
        "torchrun --standalone --nproc-per-node 1 benchmarks/diag_step_memory.py --budget "
        "7613686272 --offload none,1 --out docs/data/{file} (one H200, code 7ef82fa; _k1: "
        "--offload 1 --steps 12 --memopt-log at 3e27433, _k1b: --offload 1 --steps 6 at d78037b)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s31[bc].json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto --warmup 9 --iters 30 --memopt-log memopt_w1_s31b.log --out "
        "docs/data/{file} (one H200; b: code 56c2383, the re-plan reasons logged; c: 7d7fd9a, "
        "plans made as a step begins count what the last step left)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s4[57]*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto,level,offload --warmup 9 --iters 20 --memopt-log memopt_w1_s45.log "
        "--out docs/data/{file} (one H200, code 090a13f; _s47_partial: --only budgets,auto, "
        "code 4463694, cut by the device call's limit after four rows)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s53.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto,level,offload --warmup 9 --iters 20 --memopt-log memopt_w1_s53.log "
        "--out docs/data/{file} (one H200, code 7303609)",
        "gpu",
    ),
    Producer(
        "compiled_saved_s61.json",
        "python benchmarks/diag_compiled_saved.py docs/data/{file} llama,bert,t5,vit,resnet,convnext,"
        "swin,dit,whisper,mamba2,sd3,qwen2_moe (one H100, code d28b8b1 with 84b7ad2's count)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s61.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto,level,offload --warmup 9 --iters 20 --memopt-log memopt_w1_s61.log "
        "--out docs/data/{file} (one H100, code d28b8b1)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s62a.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --iters 20 --out docs/data/{file} (one H100, code d6db033; "
        "docs/data/logs/s62/gpu1.sh)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s62b.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only auto --optimizer device_overlap --targets 0.5=9360502272,0.1=7614734848 "
        "--warmup 9 --iters 20 --out docs/data/{file} (torch's peaks from the _s62a run before "
        "it on the same H100, code d6db033; docs/data/logs/s62/gpu1.sh)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s62f.json",
        "MEMOPT_FUSE_LOSS=1 OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 "
        "benchmarks/multi_gpu.py steps --only budgets,auto --warmup 9 --iters 20 --out "
        "docs/data/{file} (one H100, code 6ad7583; docs/data/logs/s62/gpu5.sh)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s6[356]*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto --warmup 9 --iters 20 --out docs/data/{file} (the fused loss on by "
        "default with a budget; docs/data/logs/s63/gpu3.sh, gpu4.sh; s65: docs/data/logs/s65/gpuC.sh"
        "; s66: --iters 30, GPU phase times, docs/data/logs/s66/gpu1.sh)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s67*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --iters 30 --out docs/data/{file} (s67a; s67b: --only "
        "budgets,fused,unfused; s67c: --only budgets,fused,auto --points 0.1, with the kernels' "
        "own time per phase; one H100, docs/data/logs/s67/gpu1.sh, gpu2.sh, gpu3.sh)",
        "gpu",
    ),
    Producer(
        "host_time_*_s67.json",
        "python benchmarks/diag_host_time.py --model convnext --budget 2083920384 --warmup 8 "
        "--iters 10 --out docs/data/{file} (one H100; docs/data/logs/s67/gpu1.sh)",
        "gpu",
    ),
    Producer(
        "diag_*_s54.json",
        "python docs/data/diag_s54/diag_overlap.py (diag_overlap_s54.json) or "
        "docs/data/diag_s54/diag_mamba32.py (diag_mamba32_s54.json), with OUT=docs/data and "
        "PYTHONPATH at the repository root (one H100, code bd26741 and 922b923; the JSON file "
        "renamed with the session's suffix)",
        "gpu",
    ),
    Producer(
        "diag_mamba2_offload_s55[ab].json",
        f"{PY}diag_zoo_offload.py --model mamba2 --variants compile,offload=4 --out "
        "docs/data/{file} (one H100; a: code bdfc0d0, host copies as Inductor laid them out; "
        "b: code 4c3e57c, host copies returned flat)",
        "gpu",
    ),
    Producer(
        "graph_pool_s56_*.json",
        f"{PY}diag_graph_pool.py --model llama --variant V --mode M [--steps 3 --history H] "
        "--json docs/data/{file} (V: compile, torch=0.5, budget=6471811072; M: reduce-overhead, "
        "'' for default_budget; _h0/_h1: compile with --history 0 and 1; one H100, working "
        "trees at baf8efe and 66082ef)",
        "gpu",
    ),
    Producer(
        "graph_pool_s57_*.json",
        f"{PY}diag_graph_pool.py --model llama --variant budget=6471811072 --mode reduce-overhead "
        "[--steps 2 --history 1] --json docs/data/{file} (one H100, code bcc1977: the tangent's "
        "copy counted under CUDA graphs)",
        "gpu",
    ),
    Producer(
        "graph_pool_s58_*.json",
        f"{PY}diag_graph_pool.py --model M --variant V --mode reduce-overhead --steps 3 "
        "--history H --json docs/data/{file} (M V H: llama offload=4 1, llama offload=4 0, vit "
        "level1 1, vit compile 1; one H100, code abb2c58: memopt's reloads under CUDA graphs)",
        "gpu",
    ),
    Producer(
        "graph_pool_s59_ro_budget.json",
        f"{PY}diag_graph_pool.py --model llama --variant budget=6471811072 --mode reduce-overhead "
        "--steps 3 --json docs/data/{file} (one H100, code 4ad5a59: "
        "a budget under CUDA graphs recomputes and does not offload)",
        "gpu",
    ),
    Producer(
        "attn_layout_s60_*.json",
        f"{PY}diag_attn_layout.py --model unet --batch B --variants V [--dtype float32] --json "
        "docs/data/{file} (B V: 8 compile,guarded (bf16); 4 compile,guarded; 4 compile,eager; "
        "one H100, diffusers 0.42.1 carried as a wheel, code 7d39f8e)",
        "gpu",
    ),
    Producer(
        "attn_layout_s59_*.json",
        f"{PY}diag_attn_layout.py --model M --batch 8 --json docs/data/{{file}} (M: t2d; one "
        "H100, diffusers 0.42.1 carried as a wheel; unet did not finish in 180 s)",
        "gpu",
    ),
    Producer(
        "diag_mamba2_kernels_s56.json",
        f"{PY}diag_zoo_offload.py --model mamba2 --variants compile,offload=4 --reps 4 --steps 2 "
        "--out docs/data/{file} (one H100, with the compute stream's kernels)",
        "gpu",
    ),
    Producer(
        "diag_mamba2_peak_s56_off[04].json",
        f"{PY}diag_zoo_peak.py --model mamba2 --offload K --warmup 4 --json docs/data/{{file}} "
        "(K: 0, 4; one H100, working tree at bb354fd)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_*_s55.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only level --optimizer O --warmup 5 --iters 10 --out docs/data/{file} (O: adamw, "
        "device_overlap; one H100)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w1_s31.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only budgets,auto --warmup 9 --iters 30 --memopt-log memopt_w1_s31.log --out "
        "docs/data/{file} (one H200, code bc3a259: the per-run corrections)",
        "gpu",
    ),
    Producer(
        "step_places_s31.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/diag_step_memory.py "
        "--budget 7613686272 --offload none,1,auto --memopt-log step_places_s31.log --out "
        "docs/data/{file} (one H200, code bc3a259)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_offload_w1_s29.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps "
        "--only offload --warmup 9 --iters 20 --out docs/data/{file} (one H200, the batched "
        "step-offload host path)",
        "gpu",
    ),
    Producer(
        "offload_host*_s29.json",
        f"{PY}diag_offload_host.py --tensors 24 --mib 32 --repeats 20 --out docs/data/{{file}} "
        "(one H200; _before_: --impl with the step offload of 7149c70)",
        "gpu",
    ),
    Producer(
        "step_choice_s66.json",
        "torchrun --standalone --nproc-per-node 1 benchmarks/diag_step_choice.py --budgets "
        "9360502272,7614734848 --offload-auto --out docs/data/{file} (one H100, code a5186a9; "
        "docs/data/logs/s66/gpu1.sh)",
        "gpu",
    ),
    Producer(
        "step_choice*_s29.json",
        "torchrun --standalone --nproc-per-node 1 benchmarks/diag_step_choice.py --budgets "
        "9359453696,7613686272 --out docs/data/{file} (one H200, code 5cebeaf; _auto: "
        "--budgets 9359453696 --offload-auto)",
        "gpu",
    ),
    Producer(
        "multi_gpu_steps_w2_s26*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --memopt-log memopt_w2_s26.log --out docs/data/{file} (two "
        "H200s; _s26g: with MEMOPT_FUSION_GUARD=1)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_s25.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--warmup 9 --memopt-log memopt_w2_s25.log --out docs/data/{file} (two H200s)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_s17*.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets --warmup 9 --memopt-log memopt_w2_s17.log --out docs/data/{file} (_s17: "
        "before the re-plan at the measured target, _s17b: after it)",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w2_auto_s14.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps "
        "--only budgets,auto --memopt-log memopt_auto.log --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w1_s14.json",
        "torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --only offload "
        "--out docs/data/{file}",
        "gpu-x2",
        "GPU 0 of the two-GPU machine",
    ),
    Producer(
        "multi_gpu_steps_w2_warmup9_2026-11-25.json",
        "OMP_NUM_THREADS=16 torchrun --standalone --nproc-per-node 2 benchmarks/multi_gpu.py steps --only budgets,offload "
        "--warmup 9 --iters 10 --out docs/data/{file}",
        "gpu-x2",
    ),
    Producer(
        "multi_gpu_steps_w1_b8_2026-11-25.json",
        "torchrun --standalone --nproc-per-node 1 benchmarks/multi_gpu.py steps --batch 8 --only level,offload --iters 2 "
        "--out docs/data/{file}",
        "gpu-x2",
        "GPU 0 of the two-GPU machine",
    ),
)
