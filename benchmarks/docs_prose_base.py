"""Data the docs' prose numbers read: the files by alias and their rows (benchmarks/docs_prose.py)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"

#: ``<!-- n:KEY -->TEXT<!-- /n -->`` (KEY: no spaces; TEXT: one line); not after a backtick,
#: so the docs can show the marker in inline code.
MARKER = re.compile(r"(?<!`)<!-- n:(?P<key>[^\s>]+) -->(?P<text>[^\n]*?)<!-- /n -->")

#: Short names of the data files the prose cites.
FILES = {
    "s8": "fsdp_step_2026-11-25_s8.json",
    "s8ab": "fsdp_step_2026-11-25_s8_ab.json",
    "s8b": "fsdp_step_2026-11-25_s8_budgets.json",
    "per_run": "fsdp_step_2026-11-25_per_run.json",
    "per_region": "fsdp_step_2026-11-25.json",
    "warmup9": "fsdp_step_2026-11-25_budgets_warmup9.json",
    "cli": "cli_timings.json",
    "p24": "param_peers_2026-11-24.json",
    "p24pip": "param_peers_pipelined_2026-11-24.json",
    "p25": "param_peers_2026-11-25.json",
    "batching": "param_peers_batching_2026-11-25.json",
    "repeat": "param_peers_repeat_2026-11-25.json",
    "adamw25": "param_cpu_adamw_2026-11-25.json",
    "s9": "fsdp_step_2026-11-25_s9.json",
    "s9r": "fsdp_step_2026-11-25_s9_reuse.json",
    "s11": "fsdp_step_2026-11-25_s11_kernels.json",
    "p9": "param_peers_2026-11-25_s9.json",
    "p9auto": "param_peers_2026-11-25_s9_auto.json",
    "p15": "param_peers_s15.json",
    "p15b": "param_peers_s15b.json",
    "p19a": "param_peers_native_s19.json",
    "p19": "param_peers_s19.json",
    "p19h": "param_peers_half_s19.json",
    "p19d": "param_peers_stage_s19.json",
    "p19e": "param_peers_head_s19.json",
    "p20": "param_peers_s20.json",
    "p20b": "param_peers_big_s20.json",
    "p20c": "param_peers_accum_s20.json",
    "p20c0": "param_peers_accum_s20_before.json",
    "p20d": "param_peers_clip_s20.json",
    "p20e": "param_peers_clip_s20b.json",
    "p21": "param_peers_s21.json",
    "p21clip": "param_peers_clip_s21.json",
    "p21clipb": "param_peers_clip_s21b.json",
    "p21ab": "param_peers_ab_s21.json",
    "clip21": "clip_host_s21.json",
    "p21dyn": "param_peers_dyn_s21.json",
    "p21c": "param_peers_s21c.json",
    "p21thr": "param_peers_threads_s21.json",
    "p21waits": "param_peers_waits_s21.json",
    "p22ao": "param_peers_cpuadamw_s22.json",
    "p22ds2": "param_peers_ds_2x512_s22.json",
    "p22ds4": "param_peers_ds_4x1024_s22.json",
    "p22half": "param_peers_half_s22.json",
    "fsvitold": "first_steps_vit_old_s22.json",
    "fsvitnooff": "first_steps_vit_nooff_s22.json",
    "fsbertold": "first_steps_bert_old_s22.json",
    "fsvitalias": "first_steps_vit_alias_s23.json",
    "fsvitcold": "first_steps_vit_cold_s23.json",
    "fsvitwarm": "first_steps_vit_warm_s23.json",
    "fsvitroom19": "first_steps_vit_room19_s23.json",
    "fsvitroom22": "first_steps_vit_room22_s23.json",
    "fsbertroom": "first_steps_bert_room_s23.json",
    "fs22": "fsdp_step_budgets_s22.json",
    "fs22old": "fsdp_step_budgets_old_s22.json",
    "ci": "ci_run.json",
    "first_hour": "first_hour.json",
    "pareto_llama": "pareto_llama.json",
    "pareto_v2": "pareto_llama_memopt_v2.json",
    "pareto_v5": "pareto_llama_v5.json",
    "copies": "copy_interference.json",
    "lb_v2": "largest_batch_v2_default_alloc.json",
    "lb_exp": "largest_batch_expandable.json",
    "llama8_v4": "offload_llama8_v4.json",
    "gpt6_v2": "offload_gpt6_v2.json",
    "mg1": "multi_gpu_steps_w1_2026-11-25.json",
    "mg2": "multi_gpu_steps_w2_2026-11-25.json",
    "mg2s25": "multi_gpu_steps_w2_s25.json",
    "mg2s26": "multi_gpu_steps_w2_s26.json",
    "mg2s26g": "multi_gpu_steps_w2_s26g.json",
    "mg2s28": "multi_gpu_steps_w2_s28.json",
    "mg1s29": "multi_gpu_steps_w1_s29.json",
    "mg1off29": "multi_gpu_steps_offload_w1_s29.json",
    "mg2r": "multi_gpu_steps_w2_warmup9_2026-11-25.json",
    "mg1b8": "multi_gpu_steps_w1_b8_2026-11-25.json",
    "mg14": "multi_gpu_steps_w2_s14b.json",
    "mg14w1": "multi_gpu_steps_w1_s14.json",
    "mg14a": "multi_gpu_steps_w2_auto_s14.json",
    "pcie2": "pcie_w2_2026-11-25.json",
    "adamw24": "param_cpu_adamw_2026-11-24.json",
    "lb_v3": "largest_batch_v3.json",
    "freeze": "freeze_check.json",
    "pt1": "plan_time_llama.json",
    "pt2": "plan_time_llama_v2.json",
    "llama8_v3": "offload_llama8_v3.json",
    "llama8_k12": "offload_llama8_k12.json",
    "llama8": "offload_llama8.json",
    "gpt6": "offload_gpt6.json",
    "llama4": "offload_llama.json",
}
#: The three param_peers.py runs of 2026-11-25 (one model, three machines).
PEER_RUNS = ("p25", "batching", "repeat")
#: The GPU zoo models docs/zoo.md's summary bullets count (the eighth session's run; DiT, run
#: in the ninth, is described beside them).
ZOO = ("qwen2", "bert", "vit", "resnet", "whisper")


@cache
def load(name: str) -> dict:
    return json.loads((DATA / FILES.get(name, name)).read_text())


def row(name: str, alias: str) -> dict:
    """A row of an fsdp_step.py file: ``compile``, ``eager``, ``l1`` (level 1), ``t0.5``
    (torch's budget 0.5), ``b0.5`` (memopt's budget at torch 0.5's peak; ``b0.5n``: its no
    offload variant, ``b0.5r``: priced by the roofline alone), ``b0.6`` (``budget=0.6``), ``k1`` (``offload_layers=1``)."""
    rows = load(name)["rows"]
    fixed = {"compile": "torch.compile", "eager": "eager FSDP2", "l1": "memopt level=1"}
    if alias in fixed:
        want = fixed[alias]
    elif alias.startswith("t"):
        want = f"torch.compile budget={alias[1:]}"
    elif alias.startswith("k"):
        want = f"memopt offload_layers={alias[1:]}"
    elif alias.startswith("b") and alias[1:] == "0.6":
        want = "memopt budget=0.6"
    elif alias.startswith("b"):
        tail = {"n": ", no offload", "r": ", roofline"}.get(alias[-1], "")
        point = alias[1:].rstrip("nr")
        want = next(r["variant"] for r in rows if r["variant"].endswith(f"(torch {point}){tail}"))
    else:
        raise KeyError(f"no row alias {alias!r} (see docs_prose.row)")
    return next(r for r in rows if r["variant"] == want)
