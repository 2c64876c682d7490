"""Minimal attempt at the ControlNet attention-recompute corruption: one diffusers Transformer2DModel
(GroupNorm -> proj_in -> BasicTransformerBlock(self-attn, cross-attn, FF) -> proj_out), tiny, CPU fp32,
memopt config=["Attention+:1:1"] vs torch.compile: loss and gradients.
python run_one.py diag_attn_min [--self-only]"""
import sys, torch
sys.path[:0] = ["/work/main", "/tmp/sweep4"]
import diffusers
from benchmarks import zoo
from memopt import _torch_compat as compat

cross = "--self-only" not in sys.argv  # --self-only: no cross-attention (attn2 is None)
torch.manual_seed(0)
net = diffusers.Transformer2DModel(
    num_attention_heads=4, attention_head_dim=8, in_channels=32, norm_num_groups=8,
    cross_attention_dim=32 if cross else None, num_layers=1).train()
g = torch.Generator().manual_seed(0)
inputs = {"hidden_states": torch.randn(2, 32, 16, 16, generator=g)}
if cross:
    inputs["encoder_hidden_states"] = torch.randn(2, 8, 32, generator=g)
print("cross-attention:", cross, "| attn processor:", type(net.transformer_blocks[0].attn1.processor).__name__)
with compat.no_compile_caches():
    l0, g0, _ = zoo.one_step(net, zoo._compiled(net), inputs)
    for plan in (["Attention+:1:1"], ["Attention+:1:-1"]):
        opt = zoo._compiled(net, config=plan)
        l1, g1, _ = zoo.one_step(net, opt, inputs)
        bad = [k for k in g0 if not torch.allclose(g1[k], g0[k], rtol=1e-4, atol=1e-5)]
        print(f"{plan}: loss {l1.item()!r} vs compile {l0.item()!r}; wrong grads {len(bad)}/{len(g0)} {bad[:3]}", flush=True)
