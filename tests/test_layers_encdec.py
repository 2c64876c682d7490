"""Layer detection on encoder-decoders: both stacks are the layers, numbered in forward order
(the encoder's, then the decoder's), so ``offload_layers=k`` and the sync dict count over both
and the report lists both; ``layers=`` still picks one container."""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn

import memopt
from memopt.meta_keys import LAYER
from memopt.passes.detect_layers import detect_layers_pass
from tests.helpers import compare


def _graph(stacks: list[tuple[str, str, bool]]) -> fx.GraphModule:
    """A chain of relu nodes with one module path each (``fwd_nn_module_stack`` when the flag
    says backward)."""
    g = fx.Graph()
    x = g.placeholder("x")
    for name, path, backward in stacks:
        x = g.call_function(torch.relu, (x,), name=name)
        key = "fwd_nn_module_stack" if backward else "nn_module_stack"
        x.meta[key] = {"k": (f"L['self'].{path}", nn.Module)}
    g.output(x)
    return fx.GraphModule(nn.Module(), g)


def _tags(gm: fx.GraphModule) -> dict[str, int | None]:
    return {n.name: n.meta[LAYER] for n in gm.graph.nodes if n.op == "call_function"}


FORWARD = [
    ("conv0", "feature.conv_layers.0", False),
    ("conv1", "feature.conv_layers.1", False),
    ("conv2", "feature.conv_layers.2", False),
    ("enc0", "model.encoder.layers.0", False),
    ("enc1", "model.encoder.layers.1", False),
    ("dec0", "model.decoder.layers.0", False),
    ("dec1", "model.decoder.layers.1", False),
    ("dec2", "model.decoder.layers.2", False),
    ("dec3", "model.decoder.layers.3", False),
]
BACKWARD = [(f"g_{n}", p, True) for n, p, _ in reversed(FORWARD)]
NAMES = [f"model.encoder.layers.{i}" for i in range(2)] + [
    f"model.decoder.layers.{i}" for i in range(4)
]


def test_both_stacks_in_forward_order_not_a_front_end_of_another_name():
    gm = _graph(FORWARD + BACKWARD)
    assert detect_layers_pass(gm) == NAMES
    tags = _tags(gm)
    assert [tags[n] for n in ("conv2", "enc0", "enc1", "dec0", "dec3")] == [None, 0, 1, 2, 5]
    assert [tags[n] for n in ("g_dec3", "g_dec0", "g_enc1", "g_enc0")] == [5, 2, 1, 0]
    # a backward graph tagged alone agrees
    bw = _graph(BACKWARD)
    assert detect_layers_pass(bw) == NAMES
    assert _tags(bw) == {f"g_{n}": tags[n] for n, _, _ in FORWARD}


def test_prefix_override_selects_one_stack():
    gm = _graph(FORWARD + BACKWARD)
    assert detect_layers_pass(gm, prefix="model.decoder.layers") == NAMES[2:]
    tags = _tags(gm)
    assert (tags["enc1"], tags["dec0"], tags["g_dec3"]) == (None, 0, 3)


def _whisper():
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=128,
        num_mel_bins=16,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=16,
        max_target_positions=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        decoder_start_token_id=0,
        use_cache=False,
    )
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    inputs = {
        "input_features": torch.randn(2, 16, 32, generator=g),
        "labels": torch.randint(1, 128, (2, 8), generator=g),
    }
    return transformers.WhisperForConditionalGeneration(cfg).train(), inputs


def test_whisper_offload_layers_reaches_into_the_decoder():
    model, inputs = _whisper()
    # the first 3 layers in forward order: both encoder layers and the first decoder layer (the
    # second stays); compare() asserts loss and gradients equal to plain torch.compile's
    rep, _, _, _ = compare(model, inputs, offload_layers=3, offload_min_bytes=0)
    extra = rep.regions[0].extra
    names = NAMES[:4]  # two encoder layers, two decoder layers
    assert extra["layers"]["names"] == names
    per_layer = extra["offload"]["bytes_per_layer"]
    assert sorted(per_layer) == ["0", "1", "2"] and all(v > 0 for v in per_layer.values())
    assert rep.to_dict()["regions"][0]["extra"]["layers"]["names"] == names


def test_t5_both_stacks_and_the_layers_override():
    import transformers

    cfg = transformers.T5Config(
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        vocab_size=128,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(cfg).train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 128, (2, 16), generator=g)
    inputs = {"input_ids": ids, "labels": torch.randint(1, 128, (2, 8), generator=g)}
    both = [f"encoder.block.{i}" for i in range(2)] + [f"decoder.block.{i}" for i in range(2)]
    for layers, names in ((None, both), ("decoder.block", both[2:])):
        torch._dynamo.reset()
        opt = memopt.optimize(model, layers=layers)
        opt(**inputs).loss.backward()
        assert memopt.report(opt).regions[0].extra["layers"]["names"] == names
