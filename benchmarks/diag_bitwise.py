"""Are gradients with activation offload bitwise equal to those without? And if not, why?

For a small Hugging Face Llama (deterministic algorithms, cuBLAS workspace pinned) it compares
one training step's loss and gradients: the baseline against itself (same compile, and a fresh
compile), and offload of k layers against the baseline, in bf16 and fp32, with and without
Inductor's ``emulate_precision_casts`` (round every low-precision intermediate as eager does,
so fusion boundaries cannot change the numbers).

    CUBLAS_WORKSPACE_CONFIG=:4096:8 python benchmarks/diag_bitwise.py
"""

from __future__ import annotations

import itertools
import os

import torch

import memopt

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def build(dtype, attn):
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=1024,
        max_position_embeddings=512,
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


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__} {torch.cuda.get_device_name()}")
    for dtype, attn, emulate in itertools.product(
        (torch.bfloat16, torch.float32), ("sdpa", "eager"), (False, True)
    ):
        torch._inductor.config.emulate_precision_casts = emulate
        model = build(dtype, attn)
        ids = torch.randint(0, 1024, (4, 512), device="cuda")
        tag = f"{str(dtype)[6:]:>8} attn={attn:<5} emulate_precision_casts={emulate!s:<5}"
        torch._dynamo.reset()
        base = torch.compile(model)
        r0 = step(model, base, ids)
        r0b = step(model, base, ids)
        torch._dynamo.reset()
        r0c = step(model, torch.compile(model), ids)
        print(f"{tag} baseline vs same compile: {compare(r0, r0b)}", flush=True)
        print(f"{tag} baseline vs recompile:    {compare(r0, r0c)}", flush=True)
        for k in (1, 3):
            torch._dynamo.reset()
            off = memopt.optimize(model, level=0, offload_layers=k, offload_min_bytes=0)
            print(
                f"{tag} offload k={k} vs baseline: {compare(r0, step(model, off, ids))}", flush=True
            )
        torch._dynamo.reset()
        rec = memopt.optimize(model, level=1)
        print(f"{tag} level 1 vs baseline:     {compare(r0, step(model, rec, ids))}", flush=True)
    torch._inductor.config.emulate_precision_casts = False


if __name__ == "__main__":
    main()
