"""torchtitan 0.3.0 itself on the CPU (docs/integrations.md, torchtitan): its Llama 3
``debugmodel`` (2 of its 6 layers, random weights) goes through its own ``parallelize_llama``
(FSDP2 on a one-process gloo group, ``apply_compile`` per TransformerBlock with
``CompileConfig(enable=True, backend="memopt")``, the loss compiled too) and trains 3 AdamW
steps; the losses match the same model uncompiled. Skipped where torchtitan is not installed
(``pip install --no-deps torchtitan==0.3.0 spmd_types==0.2.3 tyro``: its full dependencies cap
huggingface-hub below 2 and bring ~100 MB, see docs/integrations.md).

Two stand-ins for a CPU-only torch, both for torchtitan code this test never runs:
- torchtitan imports ``triton`` at import (its MoE expert-parallel kernels,
  ``distributed/minimal_async_ep/kernels.py``); torch's CUDA wheels bring triton, the CPU wheel
  does not, so where triton is missing that one module is replaced by a stub before the import.
- ``ParallelDims`` builds its device mesh on ``torchtitan.tools.utils.device_type``, which is
  "cuda" when no accelerator is found; the test sets it to "cpu".
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types

import pytest
import torch

import memopt
from memopt.errors import ConfigError
from memopt.integrations.torchtitan import check_attention, memopt_env
from memopt.measure import measure_saved

SEQ, BATCH, VOCAB, STEPS = 32, 2, 2048, 3
_KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"


def _kernel_stub() -> types.ModuleType:
    """Stands for torchtitan's Triton kernels module: every name is a function that raises."""
    stub = types.ModuleType(_KERNELS)

    def attr(name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def kernel(*args, **kwargs):
            raise RuntimeError(f"{_KERNELS}.{name}: a Triton kernel, stubbed in this test")

        return kernel

    stub.__getattr__ = attr  # type: ignore[method-assign]
    return stub


@pytest.fixture(scope="module")
def titan():
    """torchtitan's modules, a one-process gloo group, and torch settings restored after."""
    if importlib.util.find_spec("torchtitan") is None:
        pytest.skip(
            "torchtitan not installed: pip install --no-deps torchtitan==0.3.0 spmd_types tyro"
        )
    if importlib.util.find_spec("triton") is None and _KERNELS not in sys.modules:
        sys.modules[_KERNELS] = _kernel_stub()
    import torch.distributed as dist
    import torchtitan.distributed.parallel_dims as parallel_dims
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.compile import apply_compile
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import llama3_configs
    from torchtitan.models.llama3.parallelize import parallelize_llama

    dyn = torch._dynamo.config
    saved = (
        dyn.capture_scalar_outputs,
        dyn.skip_fwd_side_effects_in_bwd_under_checkpoint,
        parallel_dims.device_type,
    )
    parallel_dims.device_type = "cpu"
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallelism = ParallelismConfig()
    dist_utils.set_spmd_backend(parallelism.spmd_backend)
    ns = types.SimpleNamespace(
        CrossEntropyLoss=CrossEntropyLoss,
        CompileConfig=CompileConfig,
        TrainingConfig=TrainingConfig,
        apply_compile=apply_compile,
        ScaledDotProductAttention=ScaledDotProductAttention,
        llama3_configs=llama3_configs,
        parallelize_llama=parallelize_llama,
        parallelism=parallelism,
        dims=parallel_dims.ParallelDims.from_config(parallelism, 1),
    )
    yield ns
    if own_group:
        dist.destroy_process_group()
    dyn.capture_scalar_outputs, dyn.skip_fwd_side_effects_in_bwd_under_checkpoint = saved[:2]
    parallel_dims.device_type = saved[2]


def _model_config(titan, attn: str = "sdpa"):
    """torchtitan's llama3 debugmodel (dim 256, 16 heads, vocab 2048), first 2 layers. SDPA
    the way torchtitan's graph_trainer tests build it (its flex config, inner attention
    swapped: ``build_decoder_config_for_backend``); FlexAttention has no CPU backward."""
    cfg = titan.llama3_configs["debugmodel"](attn_backend="flex")
    cfg.layers = cfg.layers[:2]
    for layer in cfg.layers:
        layer.attention.rope = dataclasses.replace(layer.attention.rope, max_seq_len=SEQ)
        if attn == "sdpa":
            layer.attention.inner_attention = titan.ScaledDotProductAttention.Config()
    return cfg


def _build(titan, cfg, backend: str | None):
    """What torchtitan's Trainer does: build on meta, parallelize_fn, to_empty, init_weights."""
    torch.manual_seed(0)
    with torch.device("meta"):
        model = cfg.build()
    compile_config = titan.CompileConfig(enable=backend is not None, backend=backend or "inductor")
    model = titan.parallelize_llama(
        model,
        parallel_dims=titan.dims,
        training=titan.TrainingConfig(),
        parallelism=titan.parallelism,
        compile_config=compile_config,
        ac_config=None,
        dump_folder="",
    )
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights()
    model.train()
    loss_fn = titan.CrossEntropyLoss(
        titan.CrossEntropyLoss.Config(global_vocab_size=VOCAB), compile_config=compile_config
    )
    return model, loss_fn


def _locals(model) -> list[torch.Tensor]:
    """The parameters' own tensors (FSDP2 holds them as DTensors)."""
    return [getattr(p, "_local_tensor", p) for p in model.parameters()]


def _train(model, loss_fn) -> tuple[list[float], list[int]]:
    """STEPS AdamW steps on fixed random tokens; the losses and each step's measured bytes
    saved for backward (parameters left out)."""
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4)
    gen = torch.Generator().manual_seed(1)
    losses, saved = [], []
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
        inputs, labels = tokens[:, :-1], tokens[:, 1:]

        def forward(inputs=inputs, labels=labels):
            loss, _ = loss_fn(model(inputs), labels)
            return loss / labels.numel()

        loss, measured = measure_saved(forward, exclude=[*_locals(model), tokens])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        saved.append(measured.total)
    return losses, saved


def test_torchtitan_llama3_trains_through_its_apply_compile_with_memopt(
    titan, monkeypatch, tmp_path
):
    for k, v in memopt_env(level=1).items():
        monkeypatch.setenv(k, v)
    # its own caches: a report persisted by an earlier run is not restored into this one
    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path / "memopt"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    cfg = _model_config(titan)
    check_attention(cfg)  # SDPA: no FlexAttention, nothing to refuse
    eager_losses, eager_saved = _train(*_build(titan, cfg, None))
    model, loss_fn = _build(titan, cfg, "memopt")
    assert all(block._compiled_call_impl is not None for block in model.layers.values())
    losses, measured = _train(model, loss_fn)

    torch.testing.assert_close(losses, eager_losses, rtol=1e-3, atol=1e-3)
    assert losses[0] != losses[-1]  # the steps update the weights
    report = memopt.report()
    table, data = report.table(), report.to_dict()
    assert "Memory Optimizer : ON : Level 1" in table
    plans = {p["cluster_id"]: p for p in data["plans"]}
    assert plans["MatMul+"]["enabled"] and plans["MatMul+"]["freq"] == 6  # wq/wkv/wo/w1/w2/w3
    assert plans["Silu+Reshape+Mul+"]["enabled"]
    before, after = report.saved_bytes()
    assert before is not None and after is not None and after < before
    assert len(report.regions) == 2  # one TransformerBlock graph (run twice) and the loss
    print(table, "\nmeasured:", measured, "eager:", eager_saved, "predicted:", before, after)
    # the same shapes every step save the same bytes (keyed by address, FSDP2's freed
    # all-gathers made both vary from step to step with the allocator)
    assert len(set(eager_saved)) == 1 and len(set(measured)) == 1
    assert measured[0] < eager_saved[0]


def test_torchtitan_flex_attention_refuses_memopt_before_any_step(titan):
    """torchtitan's default LM attention (FlexAttention): its apply_compile refuses the memopt
    backend by name, on the meta model, before anything compiles; check_attention says so
    first in memopt's words, naming the route that works."""
    cfg = _model_config(titan, attn="flex")
    with pytest.raises(
        ConfigError, match=r"layers \[0, 1\] use FlexAttention.*attn_backend='varlen'"
    ):
        check_attention(cfg)
    with torch.device("meta"):
        model = cfg.build()
    config = titan.CompileConfig(enable=True, backend="memopt")
    with pytest.raises(ValueError, match="compile backend 'memopt' is neither 'inductor'"):
        titan.apply_compile(model, compile_config=config, parallel_dims=titan.dims)
    assert not any(block._compiled_call_impl is not None for block in model.layers.values())
