"""``python -m memopt demo``: a small GPT-style model, its plan table at level 0 and level 1,
and the measured saved-activation bytes and loss of each (runs on a GPU when there is one)."""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import memopt
from memopt.cli import progress
from memopt.measure import measure_saved_activation_bytes
from memopt.symbolic import fmt_bytes


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.act, self.out = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 512, d: int = 128, heads: int = 4, layers: int = 4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, labels):
        x = self.emb(input_ids)
        for blk in self.h:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def _step(model, compiled, ids):
    model.zero_grad(set_to_none=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    loss, nbytes = measure_saved_activation_bytes(
        lambda: compiled(ids, ids), exclude=[*model.parameters(), ids]
    )
    loss.backward()
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    return loss.detach().float().item(), nbytes, peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memopt demo", description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    model = TinyGPT(layers=args.layers).to(device=device, dtype=dtype)
    ids = torch.randint(0, 512, (args.batch, args.seq), device=device)
    print(
        f"memopt {memopt.__version__} demo: TinyGPT, {args.layers} layers, batch "
        f"{args.batch} x {args.seq} tokens, {dtype} on {device}\n"
    )
    results = {}
    with progress.reporting("demo", None) as shown:  # on stderr, on a terminal only
        for title, kwargs in (
            ("level 0 (plans listed, none applied)", {"level": 0}),
            ("level 1 (every recompute plan applied)", {"level": 1}),
        ):
            torch._dynamo.reset()
            t0 = time.perf_counter()
            name = title.split(" (")[0]
            print(f"compiling and running {name} (torch.compile: ~10-20 s on 2 CPU cores)...", flush=True)  # fmt: skip
            shown.phase(f"compiling and running {name}")
            compiled = memopt.optimize(model, **kwargs)
            _step(model, compiled, ids)  # compile + warm-up
            loss, nbytes, peak = _step(model, compiled, ids)
            shown.phase(None)  # the bar is closed before stdout gets the table
            rep = memopt.report(compiled)
            results[kwargs["level"]] = (loss, nbytes, rep, peak)
            print(f"=== {title}: compiled and ran in {time.perf_counter() - t0:.1f} s ===")
            print(rep.table())
            peak_txt = f"; peak GPU memory {fmt_bytes(peak)}" if peak is not None else ""
            print(
                f"measured activation bytes saved for backward: {nbytes:,} ({fmt_bytes(nbytes)}); "
                f"loss {loss:.6f}{peak_txt}\n"
            )
    (l0, b0, r0, p0), (l1, b1, r1, p1) = results[0], results[1]
    pred = r0.saved_bytes()[0] - r1.saved_bytes()[1]
    print("=== summary ===")
    print(
        f"saved for backward: {fmt_bytes(b0)} -> {fmt_bytes(b1)} measured "
        f"(-{fmt_bytes(b0 - b1)}, {100 * (b0 - b1) / max(b0, 1):.0f}%); the table predicted "
        f"-{fmt_bytes(pred)}"
    )
    if p0 is not None:
        print(
            f"peak GPU memory (torch.cuda.max_memory_allocated): {fmt_bytes(p0)} -> "
            f"{fmt_bytes(p1)} (-{fmt_bytes(p0 - p1)})"
        )
    print(
        f"loss: {l0:.6f} (level 0) vs {l1:.6f} (level 1): "
        f"{'identical' if l0 == l1 else f'differs by {abs(l0 - l1):.2e}'}"
    )
    print("\nTry: MEMOPT_CONFIG='BiasGelu+:1:-1' python -m memopt demo  (one plan on at level 0)")
    return 0
