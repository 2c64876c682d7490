"""docs/benchmarks.md's parameter-offload tables, rendered from benchmarks/param_peers.py and
param_cpu_adamw.py JSON."""

from __future__ import annotations

from benchmarks.docs_fmt import GiB, table

_PEER_LABELS = {
    "gpu": "gpu: all on the GPU, torch AdamW(fused)",
    "fsdp2": "fsdp2",
    "memopt": "**memopt f=1**",
    "memopt+threads=auto": 'same, `threads="auto"` (15 of 16 cores)',
    "memopt-bf16host+chunk=4194304": (
        "memopt, bf16 host shards (`host_dtype=bf16`), 4 Mi-element pieces"
    ),
    "memopt+batch=param": 'memopt, one task per parameter (`batch="param"`, the old queue)',
    "torchao": (
        "torchao 0.18 `CPUOffloadOptimizer(offload_gradients=True)` (wheel carried to the device)"
    ),
}


#: first rows of a table get the long labels
_PEER_FIRST = {
    "fsdp2": "fsdp2: `CPUOffloadPolicy` every group, torch AdamW(fused) on the CPU after backward",
    "memopt": "**memopt f=1, HostAdamW overlap, per-group tasks (default)**",
}


def param_peers(*runs: dict) -> str:
    """Runs B, A, C of 2026-11-25 (files in that order), each row against its run's fsdp2."""
    rows = []
    seen: set[str] = set()
    for letter, d in zip("BAC", runs):
        res = d["results"]
        fsdp = {(r["bs"], r["seq"]): r for r in res if r["name"] == "fsdp2" and "error" not in r}
        oom = [(r["bs"], r["seq"]) for r in res if r.get("error") == "OOM"]
        rank = {"gpu": 0, "fsdp2": 1, "memopt": 2}
        res = sorted(
            res,
            key=lambda r: (r["name"] == "torchao", r["bs"] * r["seq"], rank.get(r["name"], 3)),
        )
        for r in res:
            size = (r["bs"], r["seq"])
            if "error" in r:
                if r["name"] == "fsdp2" and size in oom:
                    who = " / ".join(
                        sorted(
                            {
                                x["name"]
                                for x in res
                                if x.get("error") and (x["bs"], x["seq"]) == size
                            }
                        )
                    )
                    rows.append(
                        (
                            letter,
                            who,
                            f"{r['bs']} × {r['seq']}",
                            f"{r.get('cap_gib', 3.5)}",
                            "out of memory (both)",
                            "",
                            "",
                            "",
                            "",
                            "",
                        )
                    )
                continue
            name = r["name"]
            label = _PEER_FIRST.get(name) if name not in seen and letter == "B" else None
            if label is None:
                label = _PEER_LABELS.get(name, name)
                if name == "memopt" and size == (2, 512) and letter != "B":
                    label = "**memopt f=1 (default)**"
            seen.add(name)
            bold = label.startswith("**")
            f = fsdp.get(size)
            ratio = f"{r['tokens_per_s'] / f['tokens_per_s']:.2f}" if f and name != "gpu" else ""
            cap = r["cap_gib"]
            cap = "none" if cap is None else f"{cap:g}"
            if name == "torchao":
                cap = "none (fp32 params on the GPU)"
            busy = (
                f"{r['host_busy_median_s']:.3f} / {r['host_wait_median_s']:.3f}"
                if "host_busy_median_s" in r
                else ""
            )

            def b(x: str, bold: bool = bold) -> str:
                return f"**{x}**" if bold and x else x

            rows.append(
                (
                    letter,
                    label,
                    f"{r['bs']} × {r['seq']}",
                    cap,
                    b(f"{r['s_per_step']:.3f}"),
                    b(f"{r['tokens_per_s']:,.0f}"),
                    b(ratio) if name != "fsdp2" else "1.00",
                    f"{r['peak_gib']:.2f}",
                    f"{r['VmHWM'] / GiB:.1f}",
                    busy,
                )
            )
    heads = ("run", "variant", "batch", "cap GiB", "s/step", "tokens/s", "vs fsdp2")
    return table(
        (*heads, "GPU peak GiB", "host RSS GiB", "update worker busy / wait, s/step"), rows
    )


def host_adamw(d: dict) -> str:
    """CPU AdamW over the model's parameters on the device host (``param_cpu_adamw.py host``)."""
    h = d["host"]

    def row(label: str, *keys: str, gbps: bool = True) -> tuple[str, str, str]:
        s = " / ".join(f"{h[k + '_s']:.3f}" for k in keys)
        g = " / ".join(f"{h[k + '_GBps']:.0f}" for k in keys) if gbps else ""
        return label, s, g

    rows = [
        row("training thread, one call per parameter", "main_per_param"),
        row("training thread, one call per layer group (lists)", "main_per_group"),
        row("worker thread, one call per parameter", "worker_per_param"),
        row("worker thread, one call per group (HostAdamW now)", "worker_per_group"),
        row("worker, team of 15 / 8 / 4 threads", "worker_team15", "worker_team8", "worker_team4"),
        row(
            "2 workers x 8 threads / 4 workers x 4 threads, groups split between them",
            "workers2_team8",
            "workers4_team4",
        ),
        (
            f"worker, 16 threads, beside pinned H2D + D2H copies "
            f"({h['dma_GBps_during_teamdefault']:.0f} GB/s of PCIe)",
            f"{h['worker_teamdefault_with_dma_s']:.3f}",
            f"{h['worker_teamdefault_with_dma_GBps']:.0f}",
        ),
        (
            f"worker, 15 threads, same copies ({h['dma_GBps_during_team15']:.0f} GB/s)",
            f"{h['worker_team15_with_dma_s']:.3f}",
            f"{h['worker_team15_with_dma_GBps']:.0f}",
        ),
        row(
            "bf16 gradient in, bf16 copy out (`torch_update`): 4 Mi / 16 Mi pieces / whole tensors",
            "bf16_writeback_chunk4194304",
            "bf16_writeback_chunk16777216",
            "bf16_writeback_chunk1073741824",
            gbps=False,
        ),
    ]
    return table(("how the update runs", "s", "GB/s (28 B/param)"), rows)


#: (run, file index, job name, batch, label) in the table's order (param_peers 2026-11-24)
_PEERS_1124 = (
    ("A", 0, "gpu", 2, "gpu: all on the GPU, torch AdamW(fused)"),
    ("A", 0, "gpu", 4, "gpu"),
    ("A", 0, "fsdp2", 2, "fsdp2: `CPUOffloadPolicy` every group, torch AdamW(fused) on the CPU"),
    ("A", 0, "fsdp2", 4, "fsdp2"),
    ("A", 0, "fsdp2", 8, "fsdp2"),
    ("A", 0, "memopt", 2, "memopt f=1, bf16 host shards, HostAdamW overlap (step waits)"),
    ("A", 0, "memopt-nooverlap", 2, "same, no overlap"),
    ("A", 0, "memopt-fp32host", 2, "memopt f=1, fp32 host shards, overlap (step waits)"),
    ("A", 0, "memopt", 4, "memopt f=1, bf16 host shards, overlap"),
    ("A", 0, "memopt", 8, "memopt f=1"),
    ("A", 0, "memopt-half", 2, "memopt f=0.5, bf16 host shards, overlap"),
    ("A", 0, "streamer", 2, "old streamer `apply_param_offload(0.9)` + CPUAdamW (deleted since)"),
    ("B", 1, "fsdp2", 2, "fsdp2"),
    ("B", 1, "fsdp2", 4, "fsdp2"),
    (
        "B",
        1,
        "memopt",
        2,
        "**memopt f=1, fp32 host shards, overlap pipelined into the next forward (the default "
        "now)**",
    ),
    ("B", 1, "memopt", 4, "same"),
)


def param_peers_1124(*runs: dict) -> str:
    """Runs A and B of 2026-11-24; loss diff = max |loss - loss of run A's uncapped gpu row|
    over the steps (same seed and data)."""
    gpu = {r["bs"]: r["losses"] for r in runs[0]["results"] if r["name"] == "gpu"}
    rows = []
    for run, i, name, bs, label in _PEERS_1124:
        r = next(x for x in runs[i]["results"] if x["name"] == name and x["bs"] == bs)
        batch = f"{r['bs']} × {r['seq']}"
        if "error" in r:
            rows.append((run, label, batch, "3.5", "out of memory", "", "", "", ""))
            continue
        diff = max(abs(a - b) for a, b in zip(r["losses"], gpu[bs]))
        cap = "none" if r["cap_gib"] is None else f"{r['cap_gib']:g}"
        rows.append(
            (
                run,
                label,
                batch,
                cap,
                f"{r['s_per_step']:.3f}",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['peak_gib']:.2f}",
                f"{r['VmHWM'] / GiB:.1f}",
                "0" if diff == 0 else f"{diff:.4f}",
            )
        )
    heads = ("run", "variant", "batch", "cap GiB", "s/step", "tokens/s", "GPU peak GiB")
    return table((*heads, "host RSS peak GiB", "loss diff"), rows)


def cpu_adamw_1124(d: dict) -> str:
    """``param_cpu_adamw.py`` (64 M elements, best of 5) on the device host."""
    rows = [
        ("torch.optim.AdamW(fused=True), fp32 param and grad", "torch_fused_fp32"),
        (
            "torch fused + bf16 write-back (grad cast in, step, cast out)",
            "torch_fused_bf16_writeback",
        ),
        (
            "memopt `torch_update`, bf16 grad + bf16 write-back, 1 Mi-element pieces",
            "memopt_bf16_writeback",
        ),
        (
            "memopt `torch_update`, same, whole tensors (the default)",
            "memopt_bf16_writeback_unchunked",
        ),
    ]
    body = [
        (label, f"{1e3 * d[k + '_s']:.1f}", f"{d[k + '_vs_torch_fused_fp32']:.2f}")
        for label, k in rows
    ]
    return table(("update", "ms", "vs torch fused fp32"), body)


_S9_LABELS = {
    "gpu": "gpu: all on the GPU, torch AdamW(fused)",
    "fsdp2": "fsdp2: `CPUOffloadPolicy` every group",
    "fsdp2-nooffload": "fsdp2, no offload (the reference of f=0.5)",
    "memopt": "memopt f=1 (default)",
    "memopt-half": "memopt `param_offload=0.5`",
    "memopt-auto": "memopt `param_offload='auto'` (chosen after step 5)",
    "torchao": "torchao 0.18 `CPUOffloadOptimizer(offload_gradients=True)`",
}


def param_peers_s9(*runs: dict) -> str:
    """The ninth session's runs D (the first auto attempt failed) and E (after the fix)."""
    out = [
        "| run | variant | batch | cap GiB | s/step | tokens/s | vs reference | GPU peak GiB "
        "| host share | host RSS GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for letter, d in zip("DE", runs):
        ok = {r["name"]: r for r in d["results"] if "error" not in r}
        ref = {"memopt": "fsdp2", "memopt-half": "fsdp2-nooffload", "memopt-auto": "gpu"}
        for r in d["results"]:
            name = _S9_LABELS.get(r["name"], r["name"])
            batch = f"{r['bs']} × {r['seq']}"
            if "error" in r:
                out.append(f"| {letter} | {name} | {batch} | | failed (see text) | | | | | |")
                continue
            base = ok.get(ref.get(r["name"], ""))
            vs = f"{base['s_per_step'] / r['s_per_step']:.2f}× {ref[r['name']]}" if base else ""
            share = r.get("host_share")
            out.append(
                f"| {letter} | {name} | {batch} | {r['cap_gib'] or 'none'} | "
                f"{r['s_per_step']:.3f} | {r['tokens_per_s']:,.0f} | {vs} | {r['peak_gib']:.2f} | "
                f"{'' if share is None else f'{share:.2f}'} | {r['VmHWM'] / 2**30:.1f} |"
            )
    return "\n".join(out) + "\n"


_S15_LABELS = {
    **_S9_LABELS,
    "memopt-auto": "memopt `param_offload='auto'` (probe after step 5, chosen after step 8)",
    "memopt-half+threads=8": "memopt `param_offload=0.5`, HostAdamW `threads=8`",
    "memopt+nvme_dir=/tmp/nv": "memopt f=1, AdamW moments on disk (`nvme_dir`)",
}
_S15_LABELS.update(
    {
        "memopt-fp32host": "memopt f=1, fp32 host shards (`host_dtype=None`, the default)",
        "memopt-bf16host-fp32reduce": "memopt f=1, bf16 host shards, reduced in fp32",
        "memopt-bf16host-fp32reduce+kernel=torch": "same, torch's fused kernel in three passes",
        "memopt-bf16host+reduce=bf16": "memopt f=1, bf16 host shards reduced in bf16 (`host_dtype='auto'`)",
        "memopt-half+host=fp32": "memopt `param_offload=0.5`, fp32 host shards",
        "memopt-half+host=fp32+kernel=torch": "same, torch's kernel (the default kernel before)",
        "memopt-half+kernel=torch": "memopt `param_offload=0.5`, bf16 host shards, torch's kernel",
        "memopt+stage=1": "memopt f=1, next group staged on a side stream (`stage_ahead=True`)",
    }
)
#: the row each variant is compared with (same run, same batch)
_S15_REF = {
    "memopt": "fsdp2",
    "memopt-fp32host": "fsdp2",
    "memopt-bf16host-fp32reduce": "fsdp2",
    "memopt-bf16host-fp32reduce+kernel=torch": "fsdp2",
    "memopt-bf16host+reduce=bf16": "fsdp2",
    "memopt-half+host=fp32": "fsdp2-nooffload",
    "memopt-half+host=fp32+kernel=torch": "fsdp2-nooffload",
    "memopt-half+kernel=torch": "fsdp2-nooffload",
    "memopt+stage=1": "fsdp2",
    "memopt-half": "fsdp2-nooffload",
    "memopt-half+threads=8": "fsdp2-nooffload",
    "memopt-auto": "gpu",
    "memopt-nooverlap": "fsdp2",
}


def param_peers_s19(*runs: dict) -> str:
    """The nineteenth session's runs (A-E) as :func:`param_peers_s15` renders them; the memopt
    rows of runs B-E ran with ``host_dtype="auto"`` (bf16 host shards at world size 1)."""
    labels = {
        "memopt": "memopt f=1, `host_dtype='auto'` (bf16 shards, bf16 reduce)",
        "memopt-half": "memopt `param_offload=0.5`, `host_dtype='auto'`",
    }
    return param_peers_s15(*runs, labels=labels)


def param_peers_s20(*runs: dict) -> str:
    """The twentieth session's runs: A (H100) every peer at 2 x 512 and 4 x 1024, B (H200) the
    largest batch both fit, C (H200) four micro-batches per step, D and E (H200) clipping to
    norm 1 (E after the fp32 norm change); memopt rows with ``host_dtype="auto"``."""
    labels = {
        "memopt": "memopt f=1, `host_dtype='auto'` (bf16 shards, bf16 reduce)",
        "memopt-nooverlap": "memopt f=1, `host_dtype='auto'`, `overlap=False`, "
        "`opt.clip_grad_norm_`",
        "fsdp2": "FSDP2 CPU offload, torch AdamW(fused) (`clip_grad_norm_` in D, E)",
    }
    return param_peers_s15(*runs, labels=labels)


def param_peers_s21(*runs: dict) -> str:
    """The twenty-first session's runs on H100s: A and B clipping to norm 1 at 2 x 512 and
    4 x 1024, C the peers without clipping, D memopt with the group notice against the
    twentieth session's code (interleaved), E the update's dynamic pieces against the static
    split (interleaved), F the peers at the end; memopt rows with ``host_dtype="auto"``."""
    labels = {
        "memopt": "memopt f=1, `host_dtype='auto'` (bf16 shards, bf16 reduce)",
        "memopt-nooverlap": "memopt f=1, `host_dtype='auto'`, `overlap=False`, "
        "`opt.clip_grad_norm_` (norm in C, factor in the update)",
        "fsdp2": "FSDP2 CPU offload, torch AdamW(fused) (`clip_grad_norm_` in A, B)",
    }
    for n in (1, 2):
        labels[f"memopt-new{n}"] = f"memopt, this session's code (group notice), run {n}"
        labels[f"memopt-old{n}"] = f"memopt, the twentieth session's code (728e95d), run {n}"
        labels[f"memopt-dynamic{n}"] = f"memopt, update in dynamic 256 Ki pieces, run {n}"
        labels[f"memopt-static{n}"] = f"memopt, update split evenly (ad8619d), run {n}"
    labels["memopt-fp32host"] = "memopt f=1, fp32 host shards (`host_dtype=None`, the default)"
    return param_peers_s15(*runs, labels=labels)


def param_peers_s15(*runs: dict, labels: dict | None = None) -> str:
    """The fifteenth session's runs A (batch 2 x 512) and B (4 x 1024 and the NVMe tier): each
    variant against its reference of the same run and batch; HostAdamW's threads and the update
    worker's median busy / the training thread's median wait per step (steps 4 on)."""
    heads = ("run", "variant", "batch", "cap GiB", "s/step", "tokens/s", "vs reference")
    heads += ("GPU peak GiB", "host share", "threads", "host busy / wait s", "host RSS GiB")
    rows = []
    for letter, d in zip("ABCDEF", runs):
        ok = {(r["name"], r["bs"]): r for r in d["results"] if "error" not in r}
        for r in d["results"]:
            name = {**_S15_LABELS, **(labels or {})}.get(r["name"], r["name"])
            batch = f"{r['bs']} × {r['seq']}"
            if "error" in r:
                err = "out of memory" if r["error"] == "OOM" else "failed"
                rows.append((letter, name, batch, "", err, "", "", "", "", "", "", ""))
                continue
            ref = _S15_REF.get(r["name"], "")
            threads = r.get("threads", "")  # from the nineteenth session: a CPU profile
            threads = r.get("worker_threads", "") if isinstance(threads, list) else threads
            base = ok.get((ref, r["bs"]))
            vs = f"{base['s_per_step'] / r['s_per_step']:.2f}× {ref}" if base else ""
            share = r.get("host_share")
            busy = r.get("host_busy_median_s")
            host = "" if busy is None else f"{busy:.3f} / {r['host_wait_median_s']:.3f}"
            rows.append(
                (
                    letter,
                    name,
                    batch,
                    r["cap_gib"] or "none",
                    f"{r['s_per_step']:.3f}",
                    f"{r['tokens_per_s']:,.0f}",
                    vs,
                    f"{r['peak_gib']:.2f}",
                    "" if share is None else f"{share:.2f}",
                    threads,
                    host,
                    f"{r['VmHWM'] / GiB:.1f}",
                )
            )
    return table(heads, rows)


def adamw_native_s19(d: dict) -> str:
    """``param_peers.py adamw``: one AdamW step over ``numel`` fp32 elements on the host, best of
    the repetitions; GB/s counts 28 B/element (fp32: w, m, v read and written, fp32 gradient
    read; bf16: a 2 B gradient read and a 2 B bf16 copy written), what one pass moves."""
    rows = []
    for key, label in (
        ("torch_fused_fp32_s", "torch fused AdamW, fp32 gradient (torch.optim.AdamW(fused=True))"),
        ("native_fp32_s", "memopt native loop, fp32 gradient"),
        ("native_bf16_writeback_s", "memopt native loop, bf16 gradient in, bf16 copy out"),
        ("memopt_bf16_writeback_unchunked_s", "torch's kernel for the same (cast, update, cast)"),
        ("torch_fused_bf16_writeback_s", "torch.optim.AdamW(fused=True) with the two casts"),
    ):
        t = d[key]
        rows.append((label, f"{t * 1e3:.1f}", f"{28 * d['numel'] / t / 1e9:.0f}",
                     f"{t / d['torch_fused_fp32_s']:.2f}"))  # fmt: skip
    heads = ("update", "ms", "GB/s (28 B/element)", "vs torch fused fp32")
    return table(heads, rows)
