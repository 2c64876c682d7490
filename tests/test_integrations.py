"""Framework recipes (memopt.integrations, docs/integrations.md): each trains a few steps on
the CPU with random data and reaches the plan table. Frameworks not installed are skipped."""

from __future__ import annotations

import importlib
import logging
import os
import types

import pytest
import torch
import torch.nn as nn

import memopt
from memopt.errors import ConfigError


def _need(name: str):
    """The framework module, or a skip where it is not installed; in CI (``CI`` set), where
    the test extra installs every framework here, a missing one fails instead of skipping."""
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name)


@pytest.fixture(autouse=True)
def _keep_torch_compile():
    """Importing lightning replaces torch.compile for the whole process (a wrapper that
    deep-copies the keyword arguments); the later test files get the original back."""
    original = torch.compile
    yield
    torch.compile = original


class Mlp(nn.Module):
    """Linear(bias) -> GELU -> Linear: one BiasGelu+ cluster."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def _loader(n=4, batch=8):
    data = torch.utils.data.TensorDataset(torch.randn(n * batch, 16), torch.randn(n * batch, 16))
    return torch.utils.data.DataLoader(data, batch_size=batch)


def _plan_on(table: str) -> bool:
    """The Mlp's GELU cluster is recomputed (id ``BiasGelu+Gelu+`` for the exact GELU)."""
    return ": ON  : BiasGelu+Gelu+:1:-1" in table


# ---- Hugging Face Trainer ----------------------------------------------------------------------
def test_hf_trainer_trains_an_optimized_model_with_the_default_columns(tmp_path):
    transformers = _need("transformers")
    _need("accelerate")
    from memopt.integrations.hf import MemoptCallback

    # one block: the Trainer's columns and steps are the point, not the depth
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=32, vocab_size=97)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    before = model.transformer.h[0].mlp.c_fc.weight.detach().clone()
    ids = torch.randint(0, 97, (12, 16))
    rows = [{"input_ids": r, "labels": r, "note": "dropped by remove_unused_columns"} for r in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    assert args.remove_unused_columns  # the default the issue found broken
    cb = MemoptCallback()
    trainer = transformers.Trainer(
        model=memopt.optimize(model, level=1), args=args, train_dataset=rows, callbacks=[cb]
    )
    out = trainer.train()
    assert out.global_step == 3 and torch.isfinite(torch.tensor(out.training_loss))
    assert not torch.equal(before, model.transformer.h[0].mlp.c_fc.weight)
    assert cb.table is not None and "Memory Optimizer : ON : Level 1" in cb.table
    assert "BiasGelu+" in cb.table


# ---- accelerate -------------------------------------------------------------------------------
def test_accelerate_prepares_an_optimized_model():
    accelerate = _need("accelerate")
    from memopt.integrations.accelerate import prepare

    accelerator = accelerate.Accelerator(cpu=True)
    model = Mlp()
    before = model.fc1.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader = prepare(accelerator, model, opt, _loader(), level=1)
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert not torch.equal(before, model._orig_mod.fc1.weight)
    assert _plan_on(memopt.report(model).table())


def test_accelerate_refuses_memopt_as_its_own_backend_name():
    accelerate = _need("accelerate")
    with pytest.raises(ValueError, match="not a valid DynamoBackend"):
        accelerate.utils.TorchDynamoPlugin(backend="memopt")


def test_accelerate_recipe_refuses_a_second_compile():
    accelerate = _need("accelerate")
    from memopt.integrations.accelerate import prepare

    # accelerate's state is a process-wide singleton: an accelerator whose plugin compiles
    plugin = accelerate.utils.TorchDynamoPlugin(backend="inductor")
    accelerator = types.SimpleNamespace(state=types.SimpleNamespace(dynamo_plugin=plugin))
    with pytest.raises(ConfigError, match="leave it at 'no'"):
        prepare(accelerator, Mlp())


# ---- Lightning -------------------------------------------------------------------------------
def test_lightning_callback_trains_two_steps(caplog):
    L = _need("lightning")
    from memopt.integrations.lightning import MemoptLightningCallback

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Mlp()

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    lit = Lit()
    before = lit.net.fc1.weight.detach().clone()
    cb = MemoptLightningCallback("net", level=1)
    trainer = L.Trainer(
        max_steps=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb],
    )
    with caplog.at_level(logging.INFO, logger="memopt"):
        trainer.fit(lit, _loader())
    assert trainer.global_step == 2
    assert hasattr(lit.net, "_orig_mod")  # the attribute is the compiled module
    assert not torch.equal(before, lit.net._orig_mod.fc1.weight)
    assert _plan_on(cb.table) and "memopt plan after the first batch" in caplog.text


def test_lightning_callback_names_the_submodules():
    L = _need("lightning")
    from memopt.integrations.lightning import MemoptLightningCallback

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Mlp()

    with pytest.raises(
        ConfigError, match=r"Lit.model is not a module; its submodules are \['net'\]"
    ):
        MemoptLightningCallback("model").setup(None, Lit(), "fit")


# ---- torchtitan ------------------------------------------------------------------------------
def test_torchtitan_env_and_config_keys():
    from memopt.integrations.torchtitan import COMPILE_ARGS, memopt_env, toml_section

    assert memopt_env(level=1, config=["BiasGelu+:1:-1", "Gemm+:1:2"], strict=True) == {
        "MEMOPT_LEVEL": "1",
        "MEMOPT_CONFIG": "BiasGelu+:1:-1,Gemm+:1:2",
        "MEMOPT_STRICT": "1",
    }
    assert memopt_env(budget="10GiB") == {"MEMOPT_BUDGET": "10GiB"}
    assert toml_section() == (
        '[compile]\nenable = true\ncomponents = ["model", "loss"]\nbackend = "memopt"'
    )
    assert COMPILE_ARGS == ("--compile.enable", "--compile.backend", "memopt")
    with pytest.raises(ConfigError, match="out of range"):
        memopt_env(level=5)
    with pytest.raises(ConfigError, match="at least one byte"):
        memopt_env(budget="0GiB")


def test_torchtitan_block_compile_route(monkeypatch):
    """What torchtitan's apply_compile does per TransformerBlock, with memopt_env's settings:
    ``block.compile(backend="memopt", fullgraph=True)``."""
    from memopt.integrations.torchtitan import memopt_env

    for k, v in memopt_env(config=["BiasGelu+Gelu+:1:-1"]).items():
        monkeypatch.setenv(k, v)
    blocks = nn.ModuleList([Mlp(), Mlp()])
    for block in blocks:
        block.compile(backend="memopt", fullgraph=True)
    x = torch.randn(8, 16, requires_grad=True)
    blocks[1](blocks[0](x)).sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in blocks.parameters())
    assert _plan_on(memopt.report().table())
