"""``memopt plan`` on models with tied weights: one parameter, one gradient, as in training.

A Hugging Face model with ``tie_word_embeddings`` holds one ``nn.Parameter`` in two modules
(the word embedding and the LM head's weight). Training's graph has it once, with one
gradient (the sum of both uses); the fake trace keeps the tie (:func:`memopt.cli.trace.fakeify`
makes one fake per real tensor). The saved bytes of every region, the logits the loss region
saves from the model's region included, equal what one real step saves.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

from memopt.cli import models
from memopt.cli.main import main
from tests.test_cli_plan import measured_saved

pytest.importorskip("transformers")


def gpt2(batch: int = 4, seq: int = 16):
    """Tiny GPT-2 (``tie_word_embeddings`` by default): ``lm_head.weight is wte.weight``."""
    import transformers as tf

    cfg = tf.GPT2Config(
        n_layer=1,  # the tie is in the embedding and the head, not in the blocks
        n_embd=64,
        n_head=4,
        vocab_size=128,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    ids = torch.randint(1, 128, (batch, seq), generator=torch.Generator().manual_seed(0))
    return tf.GPT2LMHeadModel(cfg).train(), {"input_ids": ids, "labels": ids}


def _plan(spec: str) -> dict:
    out = io.StringIO()
    argv = ["plan", spec, "--device-kind", "cpu", "--batch", "4", "--seq", "16", "--json"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize(
    ("spec", "tied"),
    [
        ("tests.test_cli_ties:gpt2", ("transformer.wte.weight", "lm_head.weight")),
        (
            "benchmarks.zoo_models:bert",
            ("bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"),
        ),
    ],
)
def test_tied_weight_is_one_parameter_with_one_gradient(spec, tied):
    source = models.resolve(spec, {})
    model = source.materialize(batch=4, seq=16, dtype=torch.float32).model
    named = dict(model.named_parameters(remove_duplicate=False))
    assert named[tied[0]] is named[tied[1]]
    unique = sum(p.numel() * p.element_size() for p in model.parameters())
    # counted per module (what an untied trace had): the tied weight twice (BERT: its bias too)
    assert sum(p.numel() * 4 for p in named.values()) - unique >= named[tied[0]].numel() * 4

    doc = _plan(spec)
    peak = doc["peak"]
    assert doc["parameters"] == sum(p.numel() for p in model.parameters())
    assert peak["components"]["parameters"]["bytes"] == unique
    assert peak["all_gradients_bytes"] == unique  # the tied weight's gradient once
    assert doc["report"]["saved_bytes_before"] == measured_saved(source, 0, 4, 16)
