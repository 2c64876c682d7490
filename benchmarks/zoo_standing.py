"""The GPU zoo's standing against issue 16's targets, as a picture: per model, the latest
measured ratio of memopt's overhead to torch's (GPU kernel time over torch.compile) at each of
torch's ``activation_memory_budget`` points, memopt given the peak torch measured there.

The files are docs/zoo.md's standing table's (``STANDING``, later files first for a point
they share). A point is drawn filled where memopt's peak was at most torch's, hollow where it
was over; the dashed lines are the target (½) and the stretch (¼). ::

    python benchmarks/zoo_standing.py --png docs/zoo_standing.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.docs_prose_core import compare, load  # noqa: E402

#: (label, run files by suffix, oldest first): docs/zoo.md's standing table. ``qwen2_s62d@fused``:
#: memopt's points of that run with ``fuse_loss=True`` (its ``--ab fused:MEMOPT_FUSE_LOSS=1`` rows).
STANDING: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ViT-L", ("vit_s28",)),
    ("DiT", ("dit_s28",)),
    ("Llama", ("llama_s25ab",)),
    ("BERT", ("bert_s35",)),
    ("ResNet-50", ("resnet_s32", "resnet_s59", "resnet_s60", "resnet_s68")),
    ("Qwen2", ("qwen2_s35", "qwen2_s47", "qwen2_s59", "qwen2_s62d@fused", "qwen2_s63b")),
    ("T5", ("t5_s36",)),
    ("Swin", ("swin_s36", "swin_s42", "swin_s45", "swin_s60", "swin_s68")),
    (
        "ConvNeXt",
        (
            "convnext_s37",
            "convnext_s40q",
            "convnext_s41c",
            "convnext_s44v",
            "convnext_s60",
            "convnext_s66",
            "convnext_s68",
        ),
    ),
    ("Mistral", ("mistral_s37", "mistral_s46b", "mistral_s59", "mistral_s63a")),
    ("Whisper", ("whisper_s32", "whisper_s59", "whisper_s65w", "whisper_s66", "whisper_s68")),
    ("Gemma 2", ("gemma2_s46b",)),
    ("BART", ("bart_s47", "bart_s65a", "bart_s68")),
    ("Phi-3", ("phi3_s44",)),
    ("wav2vec 2.0", ("wav2vec2_s44c",)),
    ("Qwen2-MoE", ("qwen2_moe_s46", "qwen2_moe_s63a")),
    ("RoBERTa", ("roberta_s46",)),
)
POINTS = (0.8, 0.5, 0.3, 0.1)
TOP = 2.0  # ratios above are drawn at the top, with their value


def standing() -> list[tuple[str, dict[float, tuple[float, bool, str]]]]:
    """Per model, per torch point: (kernel-time ratio, memopt's peak at most torch's, the
    file), from the latest file that measured the point."""
    out = []
    for label, runs in STANDING:
        got: dict[float, tuple[float, bool, str]] = {}
        for run in runs:  # "run@tag": memopt's points are that run's --ab rows of the tag
            name, _, ab = run.partition("@")
            for p in compare(load(f"zoo_gpu_{name}.json"), ab=ab)["points"]:
                if p.get("kratio") is not None and p.get("budget") in POINTS:
                    got[p["budget"]] = (p["kratio"], bool(p.get("peak_ok")), run)
        out.append((label, got))
    return out


def met(rows) -> tuple[int, int]:
    """(points met, points measured): peak at most torch's and at most half its overhead."""
    pts = [v for _, got in rows for v in got.values()]
    return sum(ok and r <= 0.5 for r, ok, _ in pts), len(pts)


def plot(rows, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 4.8))
    colors = dict(zip(POINTS, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    offsets = dict(zip(POINTS, (-0.24, -0.08, 0.08, 0.24)))
    for i, (_, got) in enumerate(rows):
        for point, (ratio, ok, _) in got.items():
            y = min(ratio, TOP)
            ax.scatter(i + offsets[point], y, s=46, color=colors[point],
                       facecolors=colors[point] if ok else "none", zorder=3)  # fmt: skip
            if ratio > TOP:
                ax.annotate(f"{ratio:.1f}", (i + offsets[point], y), fontsize=7,
                            xytext=(2, -10), textcoords="offset points")  # fmt: skip
    for point, c in colors.items():
        ax.scatter([], [], color=c, label=f"torch budget {point}")
    ax.scatter([], [], color="gray", facecolors="none", label="memopt's peak over torch's")
    ax.axhline(0.5, color="gray", ls="--", lw=1)
    ax.axhline(0.25, color="gray", ls=":", lw=1)
    ax.axhline(0.0, color="black", lw=0.5)
    ax.set_xticks(range(len(rows)), [label for label, _ in rows], rotation=30, ha="right")
    ax.set_ylim(-0.3, TOP + 0.1)
    ax.set_ylabel("memopt / torch overhead (GPU kernel time)")
    n, total = met(rows)
    ax.set_title(f"GPU zoo at torch's points: {n} of {total} met (peak ≤ torch's, ≤ ½ overhead)")
    ax.legend(fontsize=8, loc="upper left", ncol=5)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--png", type=Path, default=ROOT / "docs" / "zoo_standing.png")
    args = p.parse_args(argv)
    rows = standing()
    for label, got in rows:
        cells = [f"{pt}: {got[pt][0]:.2f}{'' if got[pt][1] else ' (peak over)'}"
                 for pt in POINTS if pt in got]  # fmt: skip
        print(f"{label:12s} " + ", ".join(cells))
    plot(rows, args.png)
    n, total = met(rows)
    print(f"{n} of {total} points met; wrote {args.png}")


if __name__ == "__main__":
    main()
