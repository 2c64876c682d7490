"""The generated tables of the docs: one renderer per section, each a function of its JSON.

``SECTIONS[name]`` names the docs/data files a section reads and the function that turns them
into markdown; ``benchmarks/docs_numbers.py`` puts the result between the section's markers.
Renderers live by topic (``docs_tables_fronts``, ``docs_tables_offload``,
``docs_tables_params``; formatting in ``docs_fmt``). Labels and verdicts are derived from the
data (e.g. "met" when memopt's overhead is at most half of torch's); hand-written prose stays
outside the markers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import docs_tables_multi as multi
from benchmarks.docs_fmt import table
from benchmarks.docs_tables_fronts import (
    fsdp_step,
    fsdp_step_s8,
    largest_batch,
    pareto_front,
    pareto_others,
    pareto_points,
    pareto_rerun,
    pareto_variants,
    plan_time,
)
from benchmarks.docs_tables_offload import offload_first, offload_gaps, offload_rows, offload_sweep
from benchmarks.docs_tables_params import (
    adamw_native_s19,
    cpu_adamw_1124,
    host_adamw,
    param_peers,
    param_peers_1124,
    param_peers_s9,
    param_peers_s15,
    param_peers_s19,
    param_peers_s20,
    param_peers_s21,
)


@dataclass(frozen=True)
class Section:
    files: tuple[str, ...]  # under docs/data
    render: Callable[..., str]  # called with the loaded JSON of each file, in order


def readme_demo(d: dict) -> str:
    return "```\n" + "\n".join(d["table_head"]) + "\n...\n```\n"


def torch_versions(d: dict) -> str:
    """The README's line on other torch releases, from ``.ci/torch_versions``' JSON."""
    parts = []
    for r in d["rows"]:
        failed = f"{r['failed']} failed, " if r["rc"] != 0 else ""
        took = "" if r["test_s"] is None else f" in {r['test_s'] / 60:.1f} min"
        parts.append(
            f"torch {r['torch']} at {r['memopt']} ({r['date']}): {failed}{r['passed']} passed, "
            f"{r['skipped']} skipped{took}, plus {r['install_s']} s of install"
        )
    return "; ".join(parts) + ".\n"


def cli_timings(d: dict) -> str:
    rows = []
    for r in d["rows"]:
        label = f"`{r['command']}`" + (f" ({r['label']})" if r.get("label") else "")
        rows.append(
            (
                label,
                r["traced"],
                f"{r['wall_s']:.0f} s",
                f"{r['user_s']:.1f} + {r['sys_s']:.1f} s",
                f"{r['max_rss_kib'] / (1 << 20):.2f} GiB",
            )
        )
    head = (
        f"Measured on {d['date']} on the {d['host']} (torch {d['torch']}, transformers "
        f"{d['transformers']}), one command after the other, load average "
        f"{d['load_min']:.1f} to {d['load_max']:.1f}:\n\n"
    )
    phases = "\nCPU seconds per phase (the closing line of `--progress`):\n\n" + "".join(
        f"* `{r['command']}`: {r['cpu_phases']}\n" for r in d["rows"] if r.get("cpu_phases")
    )
    return head + table(("command", "traced", "wall", "CPU (user + sys)", "max RSS"), rows) + phases


def cli_peak(d: dict) -> str:
    """The predicted-peak block of docs/cli.md's first command, from its recorded output."""
    tail = d["rows"][0]["stdout_tail"]
    start = next(i for i, ln in enumerate(tail) if ln.startswith("Predicted peak"))
    end = next(i for i in range(start, len(tail)) if tail[i].lstrip().startswith("total"))
    return "```\n" + "\n".join(ln.rstrip() for ln in tail[start : end + 1]) + "\n```\n"


#: GPU zoo models in docs/zoo.md (zoo_gpu_dit.json records DiT's failure: diffusers is not
#: installed on the device)
ZOO_GPU = ("qwen2", "bert", "vit", "resnet", "whisper", "dit")
#: the eleventh session's full re-run (kernel times, today's memory model, native-offload peers)
ZOO_GPU_S11 = ("qwen2", "bert", "vit", "resnet")
#: the twelfth session's re-run on an H200 (offload layout fix, one-region re-plan,
#: convolutions in recompute, Whisper and DiT with 9 warm-up steps)
ZOO_GPU_S12 = ("qwen2", "vit", "resnet", "whisper", "dit")
#: the thirteenth session's (H200): the allocator read per run made cheap, GPU kernel time per
#: row; then ResNet and DiT again after the strict one-region overrun check (``_s13b``)
ZOO_GPU_S13 = ("vit", "resnet", "whisper", "dit")
ZOO_GPU_S13B = ("resnet", "dit")
#: the fifteenth session's (H100): reductions priced from measurement (issue 16); DiT, ResNet
#: and ViT budgets resumed beside ``torch.compile again``
ZOO_GPU_S15 = ("qwen2", "bert", "vit", "resnet", "whisper", "dit")
#: the twenty-fourth session's (H200): Qwen2 and BERT before the measured-room relax, ResNet and
#: Whisper with it (docs/zoo.md)
ZOO_GPU_S24 = ("qwen2", "bert", "resnet", "whisper")
#: the twenty-fifth session's (H200): every budget plan beside the same plan priced on the
#: roofline alone (``[roof]``: the measured reduction times off), and the zoo's Llama
ZOO_GPU_S25 = ("qwen2", "bert", "llama")
#: ... and ResNet-50 after the solver priced its plans as decide applies them
ZOO_GPU_S25R = ("resnet",)
#: the twenty-sixth session's (H200): the best chain round (ViT's and DiT's budget rows and
#: BERT's 0.5 to 0.1 left at the deadline), and the fusion guard's A/B (``[guard]``)
ZOO_GPU_S26 = ("resnet", "bert", "vit", "dit")
ZOO_GPU_S28 = ("vit", "dit", "bert")
ZOO_GPU_S29 = ("bert",)
#: the thirty-second session's (H200): Whisper and ResNet-50 on the code of a404657
ZOO_GPU_S32 = ("whisper", "resnet")
ZOO_GPU_S26FG = ("llama", "bert")


def zoo_gpu(*docs: dict) -> str:
    """benchmarks/zoo_gpu.py's summary and per-model tables."""
    from benchmarks.zoo_gpu_report import markdown

    return markdown(list(docs))


def _zoo_gpu_of(suffix: str, doc: str) -> Callable[..., str]:
    """The renderer of one session's GPU zoo files (``zoo_gpu_<model><suffix>.json``)."""

    def render(*docs: dict) -> str:
        from benchmarks.zoo_gpu_report import markdown

        return markdown(list(docs), suffix=suffix)

    render.__doc__ = doc
    return render


def _zf(suffix: str, models: str) -> tuple[str, ...]:
    return tuple(f"zoo_gpu_{m}{suffix}.json" for m in models.split())


def _zoo_files(suffix: str, models: str) -> Section:
    """The section of one session's GPU zoo files (``zoo_gpu_<model><suffix>.json``)."""
    return Section(_zf(suffix, models), _zoo_gpu_of(suffix, f"The GPU zoo's {suffix} files."))


zoo_gpu_s11 = _zoo_gpu_of("_s11", "The eleventh session's files.")
zoo_gpu_s12 = _zoo_gpu_of("_s12", "The twelfth session's files.")
zoo_gpu_s13 = _zoo_gpu_of("_s13", "The thirteenth session's files.")
zoo_gpu_s13b = _zoo_gpu_of("_s13b", "... and its re-run of ResNet and DiT.")
zoo_gpu_s15 = _zoo_gpu_of("_s15", "The fifteenth session's files (H100).")
zoo_gpu_s24 = _zoo_gpu_of("_s24", "The twenty-fourth session's files (H200).")
zoo_gpu_s25ab = _zoo_gpu_of("_s25ab", "The twenty-fifth session's A/B files (H200).")
zoo_gpu_s25 = _zoo_gpu_of("_s25", "The twenty-fifth session's ResNet after the fix (H200).")
zoo_gpu_s26 = _zoo_gpu_of("_s26", "The twenty-sixth session's best-chain-round files (H200).")
zoo_gpu_s26fg = _zoo_gpu_of("_s26fg", "The twenty-sixth session's fusion-guard A/B (H200).")
zoo_gpu_s28 = _zoo_gpu_of("_s28", "The twenty-eighth session's ViT, DiT and BERT (H200).")
zoo_gpu_s29 = _zoo_gpu_of("_s29", "The twenty-ninth session's BERT (H200).")
zoo_gpu_s32 = _zoo_gpu_of("_s32", "The thirty-second session's Whisper and ResNet-50 (H200).")
zoo_gpu_s34 = _zoo_gpu_of("_s34", "The thirty-fourth session's BERT (H200).")
zoo_gpu_s35 = _zoo_gpu_of("_s35", "The thirty-fifth session's BERT and Qwen2 (H200).")
zoo_gpu_s36 = _zoo_gpu_of("_s36", "The thirty-sixth session's T5, Swin and Qwen2 (H200).")
zoo_gpu_s36c = _zoo_gpu_of("_s36_concurrent", "... and its rows timed beside another run.")
zoo_gpu_s37 = _zoo_gpu_of("_s37", "The thirty-seventh session's ConvNeXt and Mistral (H200).")


def _ab(*docs: dict) -> str:
    """GPU zoo rows beside their ``[auto]`` copies (the fusion guard A/B)."""
    from benchmarks.zoo_gpu_report import ab_rows

    return ab_rows(*docs)


def baseline_prices(*docs: dict) -> str:
    """Per GPU zoo file: torch.compile's measured kernel time per step against the planner's
    price of the same unplanned step (``baseline_step_s`` of its first budget row)."""
    rows = []
    for d in docs:
        base = next(r for r in d["rows"] if r["variant"] == "torch.compile")
        plan = next(
            r["planner"][0]
            for r in d["rows"]
            if r["kind"] == "budget" and r.get("planner") and r["planner"][0]
        )
        priced = plan["baseline_step_s"] * 1e3
        rows.append(
            [d["model"], f"{base['gpu_ms']:.2f}", f"{priced:.2f}", f"{priced / base['gpu_ms']:.2f}"]
        )
    return table(["model", "measured kernel ms", "priced ms", "priced / measured"], rows)


def prices_by_kind(*docs: dict) -> str:
    """benchmarks/diag_prices.py per file: the planner's price of the step by kind of node
    against the kernels profiled, ms a step, with how the kernels were timed."""
    rows = []
    for d in docs:
        timing = d.get("kernel_timing", "issued")  # files before the thirty-ninth session's
        for kind in ("matmul", "conv", "attention", "reduction", "pointwise"):
            priced, measured = d["priced_s"][kind] * 1e3, d["measured_s"][kind] * 1e3
            if priced or measured:
                rows.append([d["model"], timing, kind, f"{priced:.2f}", f"{measured:.2f}"])
        priced, measured = sum(d["priced_s"].values()) * 1e3, sum(d["measured_s"].values()) * 1e3
        rows.append([d["model"], timing, "**step**", f"{priced:.2f}", f"{measured:.2f}"])
    return table(["model", "kernels timed", "kind", "priced ms", "profiled ms"], rows)


zoo_gpu_s38fg = _zoo_gpu_of("_s38fg", "The thirty-eighth session's Mistral, fusion_guard A/B.")
zoo_gpu_s38fg2 = _zoo_gpu_of("_s38fg2", "... and its second call, after the fixes (H200).")
zoo_gpu_s40 = _zoo_gpu_of("_s40", "The forty-first session's Mistral and ConvNeXt, auto guard A/B.")
zoo_gpu_s40q = _zoo_gpu_of("_s40q", "The forty-first session's ConvNeXt and Swin, queued timing.")
zoo_gpu_s41 = _zoo_gpu_of("_s41", "The forty-second session's ConvNeXt at 0.1, auto guard A/B.")
zoo_gpu_s41c = _zoo_gpu_of("_s41c", "The forty-second session's ConvNeXt and Swin, compiled A/B.")
zoo_gpu_s42 = _zoo_gpu_of("_s42", "The forty-second session's last call: its new defaults.")
zoo_gpu_s43 = _zoo_gpu_of("_s43", "The forty-third session's first rows of Gemma 2 and BART.")
zoo_gpu_s43m = _zoo_gpu_of("_s43m", "The forty-third session's Mistral, one timing at a time.")
zoo_gpu_s44 = _zoo_gpu_of("_s44", "The forty-fourth session's first rows of Phi-3 and wav2vec 2.0.")
zoo_gpu_s44m = _zoo_gpu_of("_s44m", "The forty-fourth session's Mistral at 0.3 again.")
zoo_gpu_s44c = _zoo_gpu_of("_s44c", "The forty-fourth session's rows with placed excesses.")
zoo_gpu_s62d = _zoo_gpu_of("_s62d", "The sixty-second session's Qwen2, fuse_loss A/B (H100).")
zoo_gpu_s44v = _zoo_gpu_of("_s44v", "The forty-fourth session's ConvNeXt at 0.1.")
zoo_gpu_s44d = _zoo_gpu_of("_s44d", "The forty-fourth session's Mistral at 0.1, tie rule.")
zoo_gpu_s45 = _zoo_gpu_of("_s45", "The forty-fifth session's Swin at 0.1 and Mistral (plan kinds).")
zoo_gpu_s45b = _zoo_gpu_of("_s45b", "The forty-fifth session's rows, excess by what its op reads.")
zoo_gpu_s45c = _zoo_gpu_of("_s45c", "The forty-fifth session's Mistral at 0.1 again.")
zoo_gpu_s46 = _zoo_gpu_of("_s46", "The forty-sixth session's rows, the conditioned number.")
zoo_gpu_s46b = _zoo_gpu_of("_s46b", "The forty-sixth session's rows with flips.")
zoo_gpu_s47 = _zoo_gpu_of("_s47", "The forty-seventh session's Qwen2 and BART with flips.")
zoo_gpu_s53 = _zoo_gpu_of("_s53", "The fifty-third session's Qwen2 and Mistral (second run).")
zoo_gpu_s53a = _zoo_gpu_of("_s53a", "The fifty-third session's Qwen2 (first run).")
zoo_gpu_peers_s58 = _zoo_gpu_of("_peers_s58", "The fifty-eighth session's peers (H100).")


def _load(data: Path, name: str) -> Any:
    text = (data / name).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # JSON lines (one run a line): the list of them
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def section_cpu_fusion(rows: list) -> str:
    """diag_section_cpu.py runs with and without the fusion guard: per model and budget,
    Inductor's peak against the model's of the same plan (the plan does not change)."""
    out = [
        "| model | budget | model's peak B | Inductor's, no guard | with the guard | refused |",
        "|---|---|---|---|---|---|",
    ]
    pairs: dict[tuple, dict] = {}
    for r in rows:
        pairs.setdefault((r["model"], r["budget"]), {})[bool(r["fusion_guard"])] = r
    for (model, budget), p in pairs.items():
        if set(p) != {False, True}:
            continue
        m = p[False]["model_peak"]
        off, on = (p[g]["inductor"]["peak"] for g in (False, True))
        out.append(
            f"| {model} | {budget} | {m:,} | {off:,} ({100 * (off / m - 1):+.1f}%) "
            f"| {on:,} ({100 * (on / m - 1):+.1f}%) | {p[True]['fusions_refused']} |"
        )
    return "\n".join(out) + "\n"


def section_cpu_zoo(rows: list) -> str:
    """diag_section_cpu.py over the zoo at one budget: per model, Inductor's peak of the
    compiled plan against the planner's model of it, and the phase of each."""
    out = [
        "| model | budget | model's peak B | Inductor's peak B | Inductor vs model | "
        "Inductor's peak in |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, ind = r["model_peak"], r["inductor"]
        phase = "forward" if ind["fwd_peak"] >= ind["bwd_peak"] else "backward"
        out.append(
            f"| {r['model']} | {r['budget']} | {m:,} | {ind['peak']:,} | "
            f"{100 * (ind['peak'] / m - 1):+.1f}% | {phase} |"
        )
    return "\n".join(out) + "\n"


def section_cpu_pool(rows: list) -> str:
    """diag_section_cpu.py with the section's ``peak_unpooled``: per model, Inductor's peak of
    the compiled plan against the planner's model, with and without the reuse pool's hold."""
    out = [
        "| model | model's peak B | Inductor's peak B | vs model | without the pool's hold B "
        "| vs model |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, ind = r["model_peak"], r["inductor"]
        out.append(
            f"| {r['model']} | {m:,} | {ind['peak']:,} | {100 * (ind['peak'] / m - 1):+.1f}% "
            f"| {ind['peak_unpooled']:,} | {100 * (ind['peak_unpooled'] / m - 1):+.1f}% |"
        )
    return "\n".join(out) + "\n"


def section_cpu_reorder(rows: list) -> str:
    """diag_section_cpu.py over the zoo with Inductor's ``reorder_for_peak_memory`` on (the
    default) and off: per model, the model's peak against Inductor's in each order."""
    by = {}
    for r in rows:
        off = "reorder_for_peak_memory=False" in r.get("inductor_settings", ())
        by.setdefault(r["model"], {})["off" if off else "on"] = r
    out = [
        "| model | model's peak B | Inductor's peak B (reorder on, the default) | vs model "
        "| reorder off | vs model |",
        "|---|---|---|---|---|---|",
    ]
    for model, pair in by.items():
        m = pair["on"]["model_peak"]
        on, off = pair["on"]["inductor"]["peak"], pair["off"]["inductor"]["peak"]
        out.append(
            f"| {model} | {m:,} | {on:,} | {100 * (on / m - 1):+.1f}% | {off:,} | "
            f"{100 * (off / m - 1):+.1f}% |"
        )
    return "\n".join(out) + "\n"


SECTIONS: dict[str, Section] = {
    "readme_demo": Section(("readme_demo.json",), readme_demo),
    "cli_timings": Section(("cli_timings.json",), cli_timings),
    "cli_peak": Section(("cli_timings.json",), cli_peak),
    "torch_versions": Section(("torch_versions_2026-12-06.json",), torch_versions),
    "fsdp_step_per_run": Section(("fsdp_step_2026-11-25_per_run.json",), fsdp_step),
    "fsdp_step_s8": Section(("fsdp_step_2026-11-25_s8.json",), fsdp_step_s8),
    "fsdp_step_s8_ab": Section(("fsdp_step_2026-11-25_s8_ab.json",), fsdp_step_s8),
    "fsdp_step_s9": Section(("fsdp_step_2026-11-25_s9.json",), fsdp_step_s8),
    "fsdp_step_s9_reuse": Section(("fsdp_step_2026-11-25_s9_reuse.json",), fsdp_step_s8),
    "multi_gpu_steps": Section(
        ("multi_gpu_steps_w2_2026-11-25.json", "multi_gpu_steps_w1_2026-11-25.json"), multi.steps
    ),
    "multi_gpu_steps_s14": Section(
        ("multi_gpu_steps_w2_s14b.json", "multi_gpu_steps_w1_s14.json"), multi.steps
    ),
    "multi_gpu_steps_auto_s14": Section(("multi_gpu_steps_w2_auto_s14.json",), multi.steps_repeat),
    "multi_gpu_steps_s25": Section(("multi_gpu_steps_w2_s25.json",), multi.steps_repeat),
    "multi_gpu_steps_s26": Section(("multi_gpu_steps_w2_s26.json",), multi.steps_repeat),
    "multi_gpu_steps_s26g": Section(("multi_gpu_steps_w2_s26g.json",), multi.steps_repeat),
    "multi_gpu_steps_s28": Section(("multi_gpu_steps_w2_s28.json",), multi.steps_repeat),
    **multi.fsdp_sections(Section),  # issue 14's FSDP2 step, re-measured session after session
    "multi_gpu_steps_repeat": Section(
        ("multi_gpu_steps_w2_warmup9_2026-11-25.json",), multi.steps_repeat
    ),
    "multi_gpu_losses": Section(
        ("multi_gpu_steps_w2_2026-11-25.json", "multi_gpu_steps_w1_b8_2026-11-25.json"),
        multi.losses,
    ),
    "multi_gpu_params": Section(
        (
            "multi_gpu_params_w2_2026-11-25.json",
            "multi_gpu_params_w2_largest_2026-11-25.json",
            "multi_gpu_params_w1_2026-11-25.json",
            "multi_gpu_params_w1_b4_2026-11-25.json",
        ),
        multi.params,
    ),
    "multi_gpu_pcie": Section(("pcie_w2_2026-11-25.json",), multi.pcie),
    "zoo_gpu": Section(tuple(f"zoo_gpu_{m}.json" for m in ZOO_GPU), zoo_gpu),
    "zoo_gpu_s62d": Section(("zoo_gpu_qwen2_s62d.json",), zoo_gpu_s62d),
    "zoo_gpu_s62d_ab": Section(("zoo_gpu_qwen2_s62d.json",), _ab),
    "zoo_gpu_s11": Section(tuple(f"zoo_gpu_{m}_s11.json" for m in ZOO_GPU_S11), zoo_gpu_s11),
    "zoo_gpu_s12": Section(tuple(f"zoo_gpu_{m}_s12.json" for m in ZOO_GPU_S12), zoo_gpu_s12),
    "zoo_gpu_s13": Section(tuple(f"zoo_gpu_{m}_s13.json" for m in ZOO_GPU_S13), zoo_gpu_s13),
    "zoo_gpu_s13b": Section(tuple(f"zoo_gpu_{m}_s13b.json" for m in ZOO_GPU_S13B), zoo_gpu_s13b),
    "zoo_gpu_s15": Section(tuple(f"zoo_gpu_{m}_s15.json" for m in ZOO_GPU_S15), zoo_gpu_s15),
    "zoo_gpu_s24": Section(tuple(f"zoo_gpu_{m}_s24.json" for m in ZOO_GPU_S24), zoo_gpu_s24),
    "zoo_gpu_s25": Section(tuple(f"zoo_gpu_{m}_s25.json" for m in ZOO_GPU_S25R), zoo_gpu_s25),
    "zoo_gpu_s25ab": Section(tuple(f"zoo_gpu_{m}_s25ab.json" for m in ZOO_GPU_S25), zoo_gpu_s25ab),
    "section_cpu_fusion_s26": Section(("section_cpu_fusion_s26.json",), section_cpu_fusion),
    "section_cpu_fusion_s27": Section(("section_cpu_fusion_s27.json",), section_cpu_fusion),
    "section_cpu_zoo_s27": Section(("section_cpu_zoo_s27.json",), section_cpu_zoo),
    "section_cpu_zoo_guard_s27": Section(("section_cpu_zoo_guard_s27.json",), section_cpu_zoo),
    "zoo_gpu_s26": Section(tuple(f"zoo_gpu_{m}_s26.json" for m in ZOO_GPU_S26), zoo_gpu_s26),
    "zoo_gpu_s28": Section(tuple(f"zoo_gpu_{m}_s28.json" for m in ZOO_GPU_S28), zoo_gpu_s28),
    "zoo_gpu_s29": Section(tuple(f"zoo_gpu_{m}_s29.json" for m in ZOO_GPU_S29), zoo_gpu_s29),
    "zoo_gpu_s32": Section(tuple(f"zoo_gpu_{m}_s32.json" for m in ZOO_GPU_S32), zoo_gpu_s32),
    "zoo_gpu_s34": Section(("zoo_gpu_bert_s34.json",), zoo_gpu_s34),
    "zoo_gpu_s35": Section(("zoo_gpu_bert_s35.json", "zoo_gpu_qwen2_s35.json"), zoo_gpu_s35),
    "zoo_gpu_s35w": Section(("zoo_gpu_whisper_s35.json",), zoo_gpu_s35),  # its Whisper
    "zoo_gpu_s36": Section(
        ("zoo_gpu_t5_s36.json", "zoo_gpu_swin_s36.json", "zoo_gpu_qwen2_s36.json"), zoo_gpu_s36
    ),
    "zoo_gpu_s37": Section(("zoo_gpu_convnext_s37.json", "zoo_gpu_mistral_s37.json"), zoo_gpu_s37),
    "zoo_gpu_s38fg": Section(("zoo_gpu_mistral_s38fg.json",), zoo_gpu_s38fg),
    "zoo_gpu_s38fg2": Section(("zoo_gpu_mistral_s38fg2.json",), zoo_gpu_s38fg2),
    "baseline_prices_s38": Section(
        tuple(
            f"zoo_gpu_{m}.json"
            for m in (
                "mistral_s37",
                "bert_s35",
                "vit_s28",
                "convnext_s37",
                "swin_s36",
                "resnet_s32",
            )
        ),
        baseline_prices,
    ),
    "prices_s39": Section(
        ("prices_convnext_s39.json", "prices_convnext_queued_s39.json", "prices_swin_s39.json"),
        prices_by_kind,
    ),
    "zoo_gpu_s38_ab": Section(("zoo_gpu_mistral_s38fg.json", "zoo_gpu_mistral_s38fg2.json"), _ab),
    "zoo_gpu_s40": Section(("zoo_gpu_mistral_s40.json", "zoo_gpu_convnext_s40.json"), zoo_gpu_s40),
    "zoo_gpu_s40q": Section(("zoo_gpu_convnext_s40q.json", "zoo_gpu_swin_s40q.json"), zoo_gpu_s40q),
    "zoo_gpu_s40_ab": Section(("zoo_gpu_mistral_s40.json", "zoo_gpu_convnext_s40.json"), _ab),
    "prices_s40": Section(
        (
            "prices_mistral_s40.json",
            "prices_swin_s40.json",
            "prices_convnext_compiled_s40.json",
            "prices_convnext_queued_s39.json",
        ),
        prices_by_kind,
    ),
    "zoo_gpu_s41": Section(("zoo_gpu_convnext_s41.json",), zoo_gpu_s41),
    "zoo_gpu_s41_ab": Section(("zoo_gpu_convnext_s41.json",), _ab),
    "zoo_gpu_s41c": Section(("zoo_gpu_convnext_s41c.json", "zoo_gpu_swin_s41c.json"), zoo_gpu_s41c),
    "zoo_gpu_s41c_ab": Section(("zoo_gpu_convnext_s41c.json", "zoo_gpu_swin_s41c.json"), _ab),
    "zoo_gpu_s42": Section(("zoo_gpu_swin_s42.json", "zoo_gpu_mistral_s42.json"), zoo_gpu_s42),
    "zoo_gpu_s42_ab": Section(("zoo_gpu_swin_s42.json", "zoo_gpu_mistral_s42.json"), _ab),
    "zoo_gpu_s43": Section(("zoo_gpu_gemma2_s43.json", "zoo_gpu_bart_s43.json"), zoo_gpu_s43),
    "zoo_gpu_s43m": Section(("zoo_gpu_mistral_s43m.json",), zoo_gpu_s43m),
    "zoo_gpu_s43m_ab": Section(("zoo_gpu_mistral_s43m.json",), _ab),
    "zoo_gpu_s44": Section(("zoo_gpu_phi3_s44.json", "zoo_gpu_wav2vec2_s44.json"), zoo_gpu_s44),
    "zoo_gpu_s44m": Section(("zoo_gpu_mistral_s44m.json",), zoo_gpu_s44m),
    "zoo_gpu_s44c": Section(
        ("zoo_gpu_mistral_s44c.json", "zoo_gpu_wav2vec2_s44c.json", "zoo_gpu_gemma2_s44c.json"),
        zoo_gpu_s44c,
    ),
    "zoo_gpu_s44v": Section(("zoo_gpu_convnext_s44v.json",), zoo_gpu_s44v),
    "zoo_gpu_s44d": Section(("zoo_gpu_mistral_s44d.json",), zoo_gpu_s44d),
    "zoo_gpu_s45": Section(("zoo_gpu_mistral_s45.json", "zoo_gpu_swin_s45.json"), zoo_gpu_s45),
    "zoo_gpu_s45b": Section(_zf("_s45b", "mistral gemma2"), zoo_gpu_s45b),
    "zoo_gpu_s45c": Section(("zoo_gpu_mistral_s45c.json",), zoo_gpu_s45c),
    "zoo_gpu_s46": Section(("zoo_gpu_gemma2_s46.json", "zoo_gpu_mistral_s46.json"), zoo_gpu_s46),
    "zoo_gpu_s46b": Section(_zf("_s46b", "gemma2 mistral"), zoo_gpu_s46b),
    "zoo_gpu_s46n": Section(_zf("_s46", "qwen2_moe roberta"), zoo_gpu_s46),
    "zoo_gpu_s47": Section(("zoo_gpu_qwen2_s47.json", "zoo_gpu_bart_s47.json"), zoo_gpu_s47),
    "zoo_gpu_s53": Section(("zoo_gpu_qwen2_s53.json", "zoo_gpu_mistral_s53.json"), zoo_gpu_s53),
    "zoo_gpu_s53a": Section(("zoo_gpu_qwen2_s53a.json",), zoo_gpu_s53a),
    "zoo_gpu_peers_s58": Section(
        ("zoo_gpu_qwen2_peers_s58.json", "zoo_gpu_vit_peers_s58.json"), zoo_gpu_peers_s58
    ),
    "zoo_gpu_s59": _zoo_files("_s59", "mistral qwen2 whisper resnet"),
    "zoo_gpu_s60": _zoo_files("_s60", "resnet convnext swin"),
    "zoo_gpu_s63a": _zoo_files("_s63a", "qwen2_moe mistral"),
    "zoo_gpu_s63b": _zoo_files("_s63b", "qwen2"),
    "zoo_gpu_s65a": _zoo_files("_s65a", "bart"),
    "zoo_gpu_s66": _zoo_files("_s66", "whisper convnext"),
    "zoo_gpu_s65w": _zoo_files("_s65w", "whisper"),
    "zoo_gpu_s68": _zoo_files("_s68", "convnext whisper bart resnet swin"),
    "prices_s41": Section(
        ("prices_swin_compiled_s41.json", "prices_swin_s40.json"), prices_by_kind
    ),
    "zoo_gpu_s36c": Section(
        tuple(f"zoo_gpu_{m}_s36_concurrent.json" for m in ("t5", "swin", "qwen2")), zoo_gpu_s36c
    ),
    "section_cuda_zoo_s28": Section(("section_cuda_zoo_s28.json",), section_cpu_zoo),
    "section_cpu_zoo_s28": Section(("section_cpu_zoo_s28.json",), section_cpu_zoo),
    "section_cpu_wide_s32": Section(("section_cpu_wide_s32.json",), section_cpu_zoo),
    "section_cpu_wide_s33": Section(("section_cpu_wide_s33.json",), section_cpu_pool),
    "section_cpu_wide_s33b": Section(("section_cpu_wide_s33b.json",), section_cpu_pool),
    "section_cpu_all_s35": Section(("section_cpu_all_s35.json",), section_cpu_pool),
    "section_cpu_reorder_s31": Section(("section_cpu_reorder_s31.json",), section_cpu_reorder),
    "zoo_gpu_s26fg": Section(
        tuple(f"zoo_gpu_{m}_s26fg.json" for m in ZOO_GPU_S26FG), zoo_gpu_s26fg
    ),
    "fsdp_step_s11": Section(("fsdp_step_2026-11-25_s11_kernels.json",), fsdp_step_s8),
    "pareto_llama_v7": Section(("pareto_llama_v7.json", "pareto_llama_v6.json"), pareto_front),
    "offload_llama8_v4": Section(
        ("offload_llama8_v4.json", "offload_llama8_v3.json"), offload_rows
    ),
    "pareto_llama_v6": Section(("pareto_llama_v6.json",), pareto_points),
    "pareto_llama_v6_others": Section(("pareto_llama_v6.json",), pareto_others),
    "pareto_gpt2_b32": Section(("pareto_gpt2_b32.json",), pareto_points),
    "pareto_gpt2_b32_others": Section(("pareto_gpt2_b32.json",), pareto_others),
    "param_peers_2026-11-25": Section(
        (
            "param_peers_2026-11-25.json",
            "param_peers_batching_2026-11-25.json",
            "param_peers_repeat_2026-11-25.json",
        ),
        param_peers,
    ),
    "param_host_adamw_2026-11-25": Section(("param_cpu_adamw_2026-11-25.json",), host_adamw),
    "param_peers_s9": Section(
        ("param_peers_2026-11-25_s9.json", "param_peers_2026-11-25_s9_auto.json"), param_peers_s9
    ),
    "param_peers_s15": Section(("param_peers_s15.json", "param_peers_s15b.json"), param_peers_s15),
    "param_peers_s19": Section(
        (
            "param_peers_native_s19.json",
            "param_peers_s19.json",
            "param_peers_half_s19.json",
            "param_peers_stage_s19.json",
            "param_peers_head_s19.json",
        ),
        param_peers_s19,
    ),
    "adamw_native_s19": Section(("param_peers_adamw_native_s19.json",), adamw_native_s19),
    "param_peers_s20": Section(
        (
            "param_peers_s20.json",
            "param_peers_big_s20.json",
            "param_peers_accum_s20.json",
            "param_peers_clip_s20.json",
            "param_peers_clip_s20b.json",
        ),
        param_peers_s20,
    ),
    "param_peers_s21": Section(
        (
            "param_peers_clip_s21.json",
            "param_peers_clip_s21b.json",
            "param_peers_s21.json",
            "param_peers_ab_s21.json",
            "param_peers_dyn_s21.json",
            "param_peers_s21c.json",
        ),
        param_peers_s21,
    ),
    "param_peers_2026-11-24": Section(
        ("param_peers_2026-11-24.json", "param_peers_pipelined_2026-11-24.json"), param_peers_1124
    ),
    "param_cpu_adamw_2026-11-24": Section(("param_cpu_adamw_2026-11-24.json",), cpu_adamw_1124),
    "plan_time_llama": Section(("plan_time_llama.json",), plan_time),
    "offload_llama8_v3": Section(
        ("offload_llama8_v3.json",), lambda d: offload_sweep(d, sync=False, zero=False)
    ),
    "offload_gpt6_v2": Section(
        ("offload_gpt6_v2.json",), lambda d: offload_sweep(d, zero=False, ms=False)
    ),
    "offload_llama8": Section(("offload_llama8.json",), offload_sweep),
    "pareto_llama": Section(("pareto_llama.json",), pareto_variants),
    "pareto_gpt2": Section(("pareto_gpt2.json",), lambda d: pareto_variants(d, predicted=False)),
    "pareto_llama_memopt_v2": Section(
        ("pareto_llama_memopt_v2.json", "pareto_llama.json"), pareto_rerun
    ),
    "diag_offload_gaps": Section(("diag_offload_gaps.json",), offload_gaps),
    "offload_gpt6": Section(("offload_gpt6.json",), offload_sweep),
    "offload_llama": Section(("offload_llama.json",), offload_first),
    "largest_batch_expandable": Section(("largest_batch_expandable.json",), largest_batch),
}


def _zoo(data: Path, device: str) -> str:
    """zoo.py's own table (``zoo.markdown``) from ``zoo_<device>.json``, at its torch version."""
    from unittest import mock

    import torch

    from benchmarks import zoo

    d = _load(data, f"zoo_{device}.json")
    with mock.patch.object(torch, "__version__", d["torch"]):
        return zoo.markdown(d["rows"], d["device"], d["size"])


def render(name: str, data: Path) -> str:
    """The markdown of section ``name`` from the JSON files in ``data``."""
    if name.startswith("zoo_") and name not in SECTIONS:
        if not (data / f"{name}.json").exists():
            raise KeyError(f"section {name!r}: no docs/data/{name}.json")
        if name.startswith("zoo_dynamic"):  # benchmarks/zoo_dynamic.py's own table
            from benchmarks import zoo_dynamic

            return zoo_dynamic.markdown(json.loads((data / f"{name}.json").read_text())["rows"])
        return _zoo(data, name[4:])
    if name not in SECTIONS:
        raise KeyError(
            f"section {name!r} has markers but no renderer: add it to SECTIONS in "
            "benchmarks/docs_tables.py"
        )
    s = SECTIONS[name]
    return s.render(*(_load(data, f) for f in s.files))
