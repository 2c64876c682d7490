"""Layer streaming and CPUAdamW on a tiny Llama (CPU: "device" tensors are CPU tensors).

Numerics are compared against the same model without offload: equal losses and gradients, and
equal training trajectories against torch.optim.AdamW.
"""

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from memopt.params import CPUAdamW, apply_param_offload, find_layers, format_placement

KB = 1024


def tiny_llama(layers: int = 6) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg)


def batch(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128, (2, 16), generator=g)


# one layer: q 64x64, k 32x64, v 32x64, o 64x64, gate/up 128x64, down 64x128, 2 norms of 64
LAYER_BYTES = 4 * (64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3 + 64 * 2)


def test_find_layers_and_placement_rows():
    model = tiny_llama()
    names = [n for n, _ in find_layers(model)]
    assert names == [f"model.layers.{i}" for i in range(6)]
    handle = apply_param_offload(model, 0.5, keep_grads=True)
    assert LAYER_BYTES == 147968
    rows = handle.placement_rows()
    assert [r["where"] for r in rows[:6]] == ["cpu"] * 5 + ["gpu"]
    assert [r["slot"] for r in rows[:6]] == [0, 1, 0, 1, 0, None]
    assert all(r["param_bytes"] == LAYER_BYTES for r in rows[:6])
    assert rows[6] == {
        "name": "(ring slots)",
        "kind": "arena",
        "param_bytes": 2 * LAYER_BYTES,
        "where": "gpu",
        "slot": None,
    }
    assert rows[7]["param_bytes"] == 4 * (128 * 64 * 2 + 64)  # embeddings, lm_head, final norm
    assert "model.layers.0..4" in format_placement(rows)
    # every streamed parameter is a view into the arena at its slot's offset
    q = model.model.layers[2].self_attn.q_proj.weight
    assert q.data_ptr() - handle.arena.buffer.data_ptr() == 0  # slot 0, first tensor
    k = model.model.layers[1].self_attn.k_proj.weight
    assert k.data_ptr() - handle.arena.buffer.data_ptr() == handle.plan.slot_bytes + 64 * 64 * 4


def test_layers_prefix_errors():
    model = tiny_llama(2)
    with pytest.raises(ValueError, match="names no submodule"):
        apply_param_offload(model, 0.5, layers_prefix="model.nope")
    with pytest.raises(ValueError, match="not a list"):
        apply_param_offload(model, 0.5, layers_prefix="model.norm")
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        apply_param_offload(model, 1.0)


@pytest.mark.parametrize("allocator", ["arena", "torch"])
def test_streamed_forward_backward_matches(allocator):
    ref, model = tiny_llama(), tiny_llama()
    handle = apply_param_offload(model, 0.5, keep_grads=True, allocator=allocator)
    x = batch()
    loss_ref = ref(x, labels=x).loss
    loss_ref.backward()
    loss = model(x, labels=x).loss
    loss.backward()
    assert torch.equal(loss, loss_ref)
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad), name
    # forward loads 5 streamed layers; backward reloads the 3 the last two evicted
    assert handle.loads == 8 and handle.h2d_bytes == 8 * LAYER_BYTES


def test_slots_really_are_reused():
    """Without the backward reload the gradients would be wrong: check the slot is shared."""
    model = tiny_llama()
    apply_param_offload(model, 0.5, keep_grads=True)
    l0, l2 = model.model.layers[0], model.model.layers[2]
    assert l0.mlp.up_proj.weight.data_ptr() == l2.mlp.up_proj.weight.data_ptr()


def test_trained_streamed_layer_needs_cpu_adamw():
    model = tiny_llama(3)
    apply_param_offload(model, 0.5)
    x = batch()
    with pytest.raises(RuntimeError, match="no memopt.CPUAdamW owns it"):
        model(x, labels=x).loss.backward()


def test_gradient_checkpointing_composes():
    ref, model = tiny_llama(), tiny_llama()
    for m in (ref, model):
        m.gradient_checkpointing_enable({"use_reentrant": False})
        m.train()
    apply_param_offload(model, 0.5, keep_grads=True)
    x = batch()
    ref(x, labels=x).loss.backward()
    model(x, labels=x).loss.backward()
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad), name


def train(model, opt, steps: int, accum: int = 1, clip: float | None = None, sched=None):
    losses = []
    for s in range(steps):
        for a in range(accum):
            x = batch(10 * s + a)
            loss = model(x, labels=x).loss / accum
            loss.backward()
            losses.append(loss.item())
        if clip is not None:
            if isinstance(opt, CPUAdamW):
                opt.clip_grad_norm_(clip)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if sched is not None:
            sched.step()
        opt.zero_grad()
    return losses


@pytest.mark.parametrize(
    "fraction, kw",
    [(0.5, {}), (0.5, {"fused_backward": True}), (0.0, {}), (0.5, {"chunk_numel": 5000})],
)
def test_training_matches_torch_adamw(fraction, kw):
    ref, model = tiny_llama(), tiny_llama()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1, fused=True)
    handle = apply_param_offload(model, fraction)
    opt = CPUAdamW(model.parameters(), lr=1e-2, weight_decay=0.1, param_offload=handle, **kw)
    assert train(model, opt, 4) == train(ref, opt_ref, 4)
    for (name, a), b in zip(ref.named_parameters(), model.parameters()):
        b = handle.host_tensor(b) if handle.host_tensor(b) is not None else b
        assert torch.equal(a, b), name


def test_accumulation_clipping_and_scheduler():
    ref, model = tiny_llama(3), tiny_llama(3)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    handle = apply_param_offload(model, 0.3)
    opt = CPUAdamW(model.parameters(), lr=1e-2, param_offload=handle)
    s_ref = torch.optim.lr_scheduler.StepLR(opt_ref, 1, 0.5)
    s = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
    a = train(ref, opt_ref, 3, accum=2, clip=0.5, sched=s_ref)
    b = train(model, opt, 3, accum=2, clip=0.5, sched=s)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-2 / 8)


def test_fused_accumulation_and_clip_refused():
    ref, model = tiny_llama(3), tiny_llama(3)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    handle = apply_param_offload(model, 0.3)
    opt = CPUAdamW(
        model.parameters(), lr=1e-2, param_offload=handle, fused_backward=True, accumulation_steps=2
    )
    a, b = train(ref, opt_ref, 2, accum=2), train(model, opt, 2, accum=2)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="fused_backward"):
        opt.clip_grad_norm_(1.0)


def test_state_dict_round_trip_with_torch_adamw(tmp_path):
    ref, model = tiny_llama(2), tiny_llama(2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    opt = CPUAdamW(model.parameters(), lr=1e-2)
    train(ref, opt_ref, 2)
    train(model, opt, 2)
    sd = opt.state_dict()
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq", "master_param"}
    torch.save(sd, tmp_path / "opt.pt")
    # CPUAdamW state -> torch AdamW, and torch AdamW state -> a fresh CPUAdamW
    copy_ref = copy.deepcopy(ref)
    opt_b = torch.optim.AdamW(copy_ref.parameters(), lr=1e-2, fused=True)
    opt_b.load_state_dict(torch.load(tmp_path / "opt.pt"))
    fresh = tiny_llama(2)
    fresh.load_state_dict(model.state_dict())
    opt_c = CPUAdamW(fresh.parameters(), lr=1e-3)
    opt_c.load_state_dict(opt_ref.state_dict())
    assert opt_c.param_groups[0]["lr"] == 1e-2
    # torch's AdamW takes our groups (no "fused" key) and runs its foreach path: close, not equal
    torch.testing.assert_close(train(copy_ref, opt_b, 2), train(ref, opt_ref, 2))
    assert train(fresh, opt_c, 2) == train(model, opt, 2)
