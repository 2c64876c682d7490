"""Are gradients with activation offload bitwise equal to those without? And if not, why?

For a small Hugging Face Llama (deterministic algorithms, cuBLAS workspace pinned) it compares
one training step's loss and gradients: the baseline against itself (same compile, and a fresh
compile), and offload of k layers against the baseline, in bf16 and fp32, with and without
Inductor's ``emulate_precision_casts`` (round every low-precision intermediate as eager does,
so fusion boundaries cannot change the numbers).

    CUBLAS_WORKSPACE_CONFIG=:4096:8 python benchmarks/diag_bitwise.py
    CUBLAS_WORKSPACE_CONFIG=:4096:8 python benchmarks/diag_bitwise.py --hidden 2048 --layers 8 \
        --vocab 32000 --seq 2048 --dtypes bfloat16 --attn sdpa --emulate 0 --inductor-deterministic
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

import memopt

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.offload_partitioner import LayerOffloadPartitioner  # noqa: E402

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def build(dtype, attn, args):
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=args.hidden // 128,
        vocab_size=args.vocab,
        max_position_embeddings=args.seq,
        attn_implementation=attn,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to("cuda", dtype)


def step(model, compiled, ids):
    model.zero_grad(set_to_none=True)
    loss = compiled(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    names = [n for n, p in model.named_parameters() if p.grad is not None]
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if n in names}


def compare(a, b) -> str:
    (la, ga), (lb, gb) = a, b
    differ = [n for n in ga if not torch.equal(ga[n], gb[n])]
    if torch.equal(la, lb) and not differ:
        return "bitwise equal"
    worst = max((ga[n].float() - gb[n].float()).abs().max().item() for n in ga)
    return f"DIFFER loss_equal={torch.equal(la, lb)} {len(differ)}/{len(ga)} grads, max|d|={worst:.3g}, e.g. {differ[:3]}"


def dump(args, dtype, attn) -> None:
    """Inductor's generated code of the baseline and of offload k=1, one file per graph."""
    from torch._inductor.utils import run_and_get_code

    os.makedirs(args.dump, exist_ok=True)
    model = build(dtype, attn, args)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
    variants = {
        "base": lambda: torch.compile(model),
        "off1": lambda: memopt.optimize(model, level=0, offload_layers=1, offload_min_bytes=0),
    }
    results = {}
    for name, make in variants.items():
        torch._dynamo.reset()
        compiled = make()
        results[name], codes = run_and_get_code(step, model, compiled, ids)
        for i, code in enumerate(codes):
            with open(os.path.join(args.dump, f"{name}_{i}.py"), "w") as f:
                f.write(code)
        print(f"{name}: {len(codes)} graphs written", flush=True)
    print(f"off1 vs base: {compare(results['base'], results['off1'])}", flush=True)
    g0, g1 = results["base"][1], results["off1"][1]
    for n in g0:
        if not torch.equal(g0[n], g1[n]):
            d = (g0[n].float() - g1[n].float()).abs()
            print(f"  {n}: {int((d > 0).sum())} of {d.numel()} differ, max {d.max().item():.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--attn", default="sdpa,eager")
    ap.add_argument("--emulate", default="0,1", help="emulate_precision_casts values to try")
    ap.add_argument("--inductor-deterministic", action="store_true")
    ap.add_argument(
        "--dump",
        default="",
        help="only write Inductor's code for the baseline and offload k=1 to this folder",
    )
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    torch._inductor.config.deterministic = args.inductor_deterministic
    print(f"torch {torch.__version__} {torch.cuda.get_device_name()} {vars(args)}")
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    emulates = [bool(int(x)) for x in args.emulate.split(",")]
    if args.dump:
        dump(args, dtypes[0], args.attn.split(",")[0])
        return
    for dtype, attn, emulate in itertools.product(dtypes, args.attn.split(","), emulates):
        torch._inductor.config.emulate_precision_casts = emulate
        model = build(dtype, attn, args)
        ids = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda")
        tag = f"{str(dtype)[6:]:>8} attn={attn:<5} emulate_precision_casts={emulate!s:<5}"
        torch._dynamo.reset()
        base = torch.compile(model)
        r0 = step(model, base, ids)
        r0b = step(model, base, ids)
        torch._dynamo.reset()
        r0c = step(model, torch.compile(model), ids)
        print(f"{tag} baseline vs same compile: {compare(r0, r0b)}", flush=True)
        print(f"{tag} baseline vs recompile:    {compare(r0, r0c)}", flush=True)
        torch._dynamo.reset()
        none = LayerOffloadPartitioner(offload_layers=1, min_bytes=1 << 60)
        r = step(model, torch.compile(model, options={"custom_partitioner_fn": none}), ids)
        print(f"{tag} custom partitioner, nothing offloaded: {compare(r0, r)}", flush=True)
        torch._dynamo.reset()
        r = step(model, memopt.optimize(model, level=0), ids)
        print(f"{tag} memopt level 0 vs baseline: {compare(r0, r)}", flush=True)
        for k in (1, 3):
            torch._dynamo.reset()
            off = memopt.optimize(model, level=0, offload_layers=k, offload_min_bytes=0)
            r = step(model, off, ids)
            print(f"{tag} offload k={k} vs baseline: {compare(r0, r)}", flush=True)
            torch._dynamo.reset()
            part = LayerOffloadPartitioner(offload_layers=k)
            r = step(model, torch.compile(model, options={"custom_partitioner_fn": part}), ids)
            print(f"{tag} LayerOffloadPartitioner k={k} vs baseline: {compare(r0, r)}", flush=True)
    torch._inductor.config.emulate_precision_casts = False


if __name__ == "__main__":
    main()
