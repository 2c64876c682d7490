"""Shared test utilities: small models and a reusable checker."""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

import memopt
from memopt.measure import measure_saved_activation_bytes


class MLP(nn.Module):
    """Linear(bias) -> GELU -> Linear, twice: the BiasGelu pattern of BERT/GPT/ViT blocks."""

    def __init__(self, d: int = 64, h: int = 256, n: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)) for _ in range(n)
        )

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x


def tiny_gpt2(**over):
    import transformers

    cfg = dict(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=128,
        n_positions=64,
        activation_function="gelu",
        attn_pdrop=0.0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    cfg.update(over)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg))


def tiny_llama(**over):
    import transformers

    cfg = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    cfg.update(over)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))


def tiny_bert(**over):
    import transformers

    cfg = dict(
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=128,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    cfg.update(over)
    return transformers.BertForMaskedLM(transformers.BertConfig(**cfg))


def run_step(model, compiled, inputs: dict, loss_fn=None):
    """One forward+backward; returns (loss, grads by name, measured saved activation bytes)."""
    model.zero_grad(set_to_none=True)
    exclude = [*model.parameters(), *inputs.values()]

    def fwd():
        out = compiled(**inputs)
        return loss_fn(out) if loss_fn else out.loss

    loss, nbytes = measure_saved_activation_bytes(fwd, exclude=exclude)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, nbytes


def compare(model, inputs, loss_fn=None, **optimize_kwargs):
    """Run plain torch.compile and memopt on the same model and inputs.

    Returns (report, measured bytes without, with) after asserting equal loss and gradients."""
    torch._dynamo.reset()
    base = torch.compile(model, dynamic=optimize_kwargs.get("dynamic"))
    l0, g0, b0 = run_step(model, base, inputs, loss_fn)
    torch._dynamo.reset()
    opt = memopt.optimize(model, **optimize_kwargs)
    l1, g1, b1 = run_step(model, opt, inputs, loss_fn)
    torch.testing.assert_close(l1, l0)
    assert g0.keys() == g1.keys()
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], msg=lambda m, k=k: f"grad {k}: {m}")
    return memopt.report(opt), b0, b1, opt


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _gloo_worker(rank: int, world: int, port: int, tmp: str, checks) -> None:
    import os

    import torch.distributed as dist

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, f"inductor-{rank}")
    os.environ["MEMOPT_CACHE_DIR"] = os.path.join(tmp, f"memopt-{rank}")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        checks(rank, tmp)
    finally:
        dist.destroy_process_group()


def spawn_gloo(checks, world: int = 2) -> None:
    """Run ``checks(rank, tmp)`` (a module-level function) in ``world`` processes joined by
    gloo, each with its own Inductor and memopt cache dirs; a failing assert fails the test."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_gloo_worker, args=(world, free_port(), tmp, checks), nprocs=world, join=True)


def spawn_gloo_job(module: str):
    """For tests/early.py: a command that runs :func:`spawn_gloo` on ``module``'s ``_checks``
    in a fresh interpreter (the ranks are spawned from it as they were from the test's process;
    a failing assert on a rank makes it exit non-zero with the rank's traceback)."""
    import sys

    code = (
        f"from tests.helpers import spawn_gloo\nfrom {module} import _checks\nspawn_gloo(_checks)"
    )

    def make(tmp):
        return [sys.executable, "-c", code], {}

    return make


@contextlib.contextmanager
def warm_compile_caches(tmp_path, monkeypatch):
    """Inductor's FX graph cache and AOTAutograd's cache switched on (conftest switches them
    off), in private directories, with memopt's report store beside them: a second compile of
    the same graph is a cache hit that skips memopt's partitioner."""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path / "memopt"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    with (
        iconfig.patch(force_disable_caches=False, fx_graph_cache=True),
        fconfig.patch(enable_autograd_cache=True),
    ):
        yield
