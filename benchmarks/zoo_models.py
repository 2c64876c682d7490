"""The zoo: one training step of many architectures, built from configs with random weights.

Each entry builds ``(model, inputs)`` at a size: ``"tiny"`` (CPU tests and CI, seconds per
model) or ``"gpu"`` (the H100 zoo, benchmarks/zoo_gpu.py: realistic widths, heads, vocabularies,
sequence lengths and image sizes, with fewer layers than the released models -- 4 to 8 per
stack -- so that eleven compiles per model stay short). Tiny models keep realistic proportions
where memory is concerned: their batch and sequence are large enough that the activations
outweigh parameters and gradients, as in real training (else the step's peak sits at the
gradients and no activation budget can move it). The builders follow the CLI's
``package.module:factory`` protocol (a callable returning ``(model, inputs)``), so
``memopt plan benchmarks.zoo_models:vit`` plans a zoo model without a GPU. The model list
lives here, apart from ``benchmarks/zoo.py`` (the runner), because the CPU tests
(``tests/test_zoo.py``) and the CLI read it too; it stays out of ``memopt/`` because it is
test data, not something a user of the library imports.

Every entry's loss is :func:`step_loss` of the model's output: the ``.loss`` an HF head
computes from the labels in the inputs, else the mean of the first output tensor.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

SIZES = ("tiny", "gpu")


@dataclass(frozen=True)
class ZooModel:
    """One architecture of the zoo."""

    name: str
    kind: str  # decoder, moe, encoder, encoder-decoder, vision, conv, diffusion, speech
    build: Callable[..., tuple[nn.Module, dict[str, Any]]]
    """``build(size="tiny", batch=None) -> (model, inputs)`` (inputs on the CPU)."""
    needs: str = "transformers"  # the package it is built with


def available(entry: ZooModel) -> bool:
    """Whether ``entry``'s package imports here (timm needs torchvision, absent beside the
    CPU torch 2.13 wheel; diffusers may be missing)."""
    if importlib.util.find_spec(entry.needs) is None:
        return False
    if entry.needs == "timm":
        try:
            import timm  # noqa: F401
        except Exception:  # torchvision that does not load beside this torch
            return False
    return True


def step_loss(out: Any) -> torch.Tensor:
    """The scalar a zoo step backpropagates: the HF loss, else the first output's mean."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, torch.Tensor):
        return out.float().mean()
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    first = next(x for x in out if isinstance(x, torch.Tensor))
    return first.float().mean()


def _pick(size: str, tiny: Any, gpu: Any) -> Any:
    if size not in SIZES:
        raise ValueError(f"zoo size {size!r}: one of {', '.join(SIZES)}")
    return tiny if size == "tiny" else gpu


def _tf():
    import transformers

    return transformers


def _training(model: nn.Module) -> nn.Module:
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    return model.train()


def _lm_inputs(vocab: int, batch: int, seq: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    return {"input_ids": ids, "labels": ids}


def _causal_lm(cls_name: str, tiny: dict, gpu: dict, tiny_bs=(4, 128), gpu_bs=(4, 2048)):
    """A builder for a causal LM ``transformers.<cls_name>`` with ``Config``-class kwargs."""

    def build(size: str = "tiny", batch: int | None = None, seq: int | None = None):
        tf = _tf()
        cls = getattr(tf, cls_name)
        cfg = cls.config_class(**_pick(size, tiny, gpu))
        for k in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop"):
            if hasattr(cfg, k):
                setattr(cfg, k, 0.0)
        b, s = _pick(size, tiny_bs, gpu_bs)
        return _training(cls(cfg)), _lm_inputs(cfg.vocab_size, batch or b, seq or s)

    return build


_IDS = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
_DEC_TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=256,
    **_IDS,
)


def _dec_gpu(hidden: int, layers: int, vocab: int, inter: int, heads: int, kv: int) -> dict:
    return dict(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
        max_position_embeddings=4096,
        **_IDS,
    )


llama = _causal_lm("LlamaForCausalLM", _DEC_TINY, _dec_gpu(2048, 8, 32000, 5632, 16, 16))
# Qwen2's 151,936-token vocabulary: the logits and the loss dominate the saved bytes
qwen2 = _causal_lm(
    "Qwen2ForCausalLM",
    {**_DEC_TINY, "vocab_size": 512},
    _dec_gpu(1536, 4, 151936, 8960, 12, 2),
    gpu_bs=(2, 2048),
)
mistral = _causal_lm("MistralForCausalLM", _DEC_TINY, _dec_gpu(4096, 4, 32000, 14336, 32, 8))
gemma2 = _causal_lm(
    "Gemma2ForCausalLM",
    {**_DEC_TINY, "head_dim": 16, "sliding_window": 8},
    {**_dec_gpu(2304, 8, 256000, 9216, 8, 4), "head_dim": 256},
    gpu_bs=(2, 2048),
)
phi3 = _causal_lm(
    "Phi3ForCausalLM", {**_DEC_TINY, "pad_token_id": 0}, _dec_gpu(3072, 6, 32064, 8192, 32, 32)
)
_MOE_TINY = dict(num_local_experts=4, num_experts_per_tok=2)
mixtral = _causal_lm(
    "MixtralForCausalLM",
    {**_DEC_TINY, **_MOE_TINY},
    {**_dec_gpu(2048, 4, 32000, 5632, 16, 8), **_MOE_TINY},
    gpu_bs=(2, 2048),
)
# Mamba2 (state-space, no attention; torch's reference scan: no mamba_ssm kernels here). Not
# in ZOO (a GPU check of layer offload on a conv + scan model, fifty-fifth session)
_SSM = dict(state_size=8, expand=2, n_groups=1, **_IDS)
mamba2 = _causal_lm(
    "Mamba2ForCausalLM",
    {**_SSM, "vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2, "head_dim": 16,
     "num_heads": 8, "chunk_size": 8},
    {**_SSM, "vocab_size": 32000, "hidden_size": 768, "num_hidden_layers": 8, "head_dim": 64,
     "num_heads": 24, "chunk_size": 128, "state_size": 64},
    tiny_bs=(4, 16),
    gpu_bs=(4, 1024),
)  # fmt: skip
_QMOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
qwen2_moe = _causal_lm(
    "Qwen2MoeForCausalLM",
    {**_DEC_TINY, **_QMOE, "shared_expert_intermediate_size": 64},
    {
        **_dec_gpu(2048, 4, 151936, 5632, 16, 16),
        **_QMOE,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
    },
    gpu_bs=(2, 2048),
)


def bert(size: str = "tiny", batch: int | None = None, seq: int | None = None):
    tf = _tf()
    cfg = tf.BertConfig(
        **_pick(
            size,
            dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, vocab_size=128),
            dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8),
        ),
        num_attention_heads=_pick(size, 4, 16),
        max_position_embeddings=512,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    b, s = _pick(size, (4, 128), (16, 512))
    return _training(tf.BertForMaskedLM(cfg)), _lm_inputs(cfg.vocab_size, batch or b, seq or s)


def roberta(size: str = "tiny", batch: int | None = None, seq: int | None = None):
    tf = _tf()
    cfg = tf.RobertaConfig(
        **_pick(
            size,
            dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, vocab_size=128),
            dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12),
        ),
        num_attention_heads=_pick(size, 4, 12),
        max_position_embeddings=_pick(size, 160, 514),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    b, s = _pick(size, (4, 128), (16, 512))
    return _training(tf.RobertaForMaskedLM(cfg)), _lm_inputs(cfg.vocab_size, batch or b, seq or s)


def _seq2seq_inputs(vocab: int, batch: int, seq: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "input_ids": torch.randint(1, vocab, (batch, seq), generator=g),
        "labels": torch.randint(1, vocab, (batch, seq // 2), generator=g),
    }


def t5(size: str = "tiny", batch: int | None = None, seq: int | None = None):
    tf = _tf()
    cfg = tf.T5Config(
        **_pick(
            size,
            dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=128),
            dict(d_model=1024, d_kv=64, d_ff=2816, num_layers=6, num_heads=16),
        ),
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    b, s = _pick(size, (4, 128), (8, 1024))
    model = tf.T5ForConditionalGeneration(cfg)
    return _training(model), _seq2seq_inputs(cfg.vocab_size, batch or b, seq or s)


def bart(size: str = "tiny", batch: int | None = None, seq: int | None = None):
    tf = _tf()
    dims = _pick(
        size,
        dict(d_model=64, ffn=128, layers=2, heads=4, vocab_size=128),
        dict(d_model=1024, ffn=4096, layers=6, heads=16, vocab_size=50265),
    )
    cfg = tf.BartConfig(
        vocab_size=dims["vocab_size"],
        d_model=dims["d_model"],
        encoder_layers=dims["layers"],
        decoder_layers=dims["layers"],
        encoder_attention_heads=dims["heads"],
        decoder_attention_heads=dims["heads"],
        encoder_ffn_dim=dims["ffn"],
        decoder_ffn_dim=dims["ffn"],
        max_position_embeddings=1024,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        **_IDS,
        decoder_start_token_id=0,
    )
    b, s = _pick(size, (4, 128), (8, 1024))
    model = tf.BartForConditionalGeneration(cfg)
    return _training(model), _seq2seq_inputs(cfg.vocab_size, batch or b, seq or s)


#: set up front: HF's classification loss sets ``config.problem_type`` in the first forward,
#: and dynamo, which guards on it, would compile the model a second time at the second step
_SINGLE_LABEL = "single_label_classification"


def _images(batch: int, channels: int, side: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "pixel_values": torch.randn(batch, channels, side, side, generator=g),
        "labels": torch.randint(0, 10, (batch,), generator=g),
    }


def vit(size: str = "tiny", batch: int | None = None):
    tf = _tf()
    dims = _pick(
        size,
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
        dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16),
    )
    side, patch = _pick(size, (32, 8), (224, 16))
    cfg = tf.ViTConfig(
        **dims,
        image_size=side,
        patch_size=patch,
        num_labels=10,
        problem_type=_SINGLE_LABEL,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    b = batch or _pick(size, 16, 64)
    return _training(tf.ViTForImageClassification(cfg)), _images(b, 3, side)


def resnet(size: str = "tiny", batch: int | None = None):
    tf = _tf()
    cfg = tf.ResNetConfig(
        **_pick(
            size,
            dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"),
            dict(),  # ResNet-50
        ),
        num_labels=10,
        problem_type=_SINGLE_LABEL,
    )
    side = _pick(size, 32, 224)
    b = batch or _pick(size, 16, 128)
    return _training(tf.ResNetForImageClassification(cfg)), _images(b, 3, side)


def convnext(size: str = "tiny", batch: int | None = None):
    tf = _tf()
    cfg = tf.ConvNextConfig(
        **_pick(size, dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2), dict()),
        num_labels=10,
        problem_type=_SINGLE_LABEL,
    )
    side = _pick(size, 32, 224)
    b = batch or _pick(size, 16, 64)
    return _training(tf.ConvNextForImageClassification(cfg)), _images(b, 3, side)


def swin(size: str = "tiny", batch: int | None = None):
    tf = _tf()
    cfg = tf.SwinConfig(
        **_pick(
            size,
            dict(embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, image_size=32),
            dict(embed_dim=128, depths=[2, 2, 6, 2], num_heads=[4, 8, 16, 32], image_size=224),
        ),
        patch_size=_pick(size, 2, 4),
        num_labels=10,
        problem_type=_SINGLE_LABEL,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        drop_path_rate=0.0,
    )
    b = batch or _pick(size, 16, 64)
    return _training(tf.SwinForImageClassification(cfg)), _images(b, 3, cfg.image_size)


def dit(size: str = "tiny", batch: int | None = None):
    import diffusers

    dims = _pick(
        size,
        dict(num_attention_heads=2, attention_head_dim=16, num_layers=2, sample_size=8),
        dict(num_attention_heads=16, attention_head_dim=72, num_layers=8, sample_size=32),
    )
    model = diffusers.DiTTransformer2DModel(**dims, in_channels=4, patch_size=2)
    b = batch or _pick(size, 8, 32)
    g = torch.Generator().manual_seed(0)
    side = dims["sample_size"]
    inputs = {
        "hidden_states": torch.randn(b, 4, side, side, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
        "class_labels": torch.randint(0, 1000, (b,), generator=g),
    }
    return model.train(), inputs


def sd3(size: str = "tiny", batch: int | None = None):
    import diffusers

    dims = _pick(
        size,
        dict(
            sample_size=8,
            num_layers=2,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            caption_projection_dim=32,
            pooled_projection_dim=16,
            pos_embed_max_size=16,
        ),
        dict(
            sample_size=64,
            num_layers=12,
            attention_head_dim=64,
            num_attention_heads=18,
            joint_attention_dim=4096,
            caption_projection_dim=1152,
            pooled_projection_dim=2048,
            pos_embed_max_size=96,
        ),
    )
    model = diffusers.SD3Transformer2DModel(**dims, in_channels=4, out_channels=4)
    b, text = batch or _pick(size, 8, 8), _pick(size, 8, 154)
    g = torch.Generator().manual_seed(0)
    side = dims["sample_size"]
    inputs = {
        "hidden_states": torch.randn(b, 4, side, side, generator=g),
        "encoder_hidden_states": torch.randn(b, text, dims["joint_attention_dim"], generator=g),
        "pooled_projections": torch.randn(b, dims["pooled_projection_dim"], generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
    }
    return model.train(), inputs


def whisper(size: str = "tiny", batch: int | None = None):
    tf = _tf()
    dims = _pick(
        size,
        dict(d_model=64, layers=2, heads=4, ffn=128, mels=16, frames=32, vocab=128),
        dict(d_model=768, layers=6, heads=12, ffn=3072, mels=80, frames=3000, vocab=51865),
    )
    cfg = tf.WhisperConfig(
        vocab_size=dims["vocab"],
        num_mel_bins=dims["mels"],
        d_model=dims["d_model"],
        encoder_layers=dims["layers"],
        decoder_layers=dims["layers"],
        encoder_attention_heads=dims["heads"],
        decoder_attention_heads=dims["heads"],
        encoder_ffn_dim=dims["ffn"],
        decoder_ffn_dim=dims["ffn"],
        max_source_positions=dims["frames"] // 2,
        max_target_positions=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        **_IDS,
        decoder_start_token_id=0,
    )
    b = batch or _pick(size, 8, 8)
    g = torch.Generator().manual_seed(0)
    inputs = {
        "input_features": torch.randn(b, dims["mels"], dims["frames"], generator=g),
        "labels": torch.randint(1, dims["vocab"], (b, _pick(size, 8, 64)), generator=g),
    }
    return _training(tf.WhisperForConditionalGeneration(cfg)), inputs


def wav2vec2(size: str = "tiny", batch: int | None = None):
    tf = _tf()
    cfg = tf.Wav2Vec2Config(
        **_pick(
            size,
            dict(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=128,
                conv_dim=(32, 32),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4,
                vocab_size=32,
            ),
            dict(vocab_size=32),  # wav2vec2-base
        ),
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        mask_time_prob=0.0,
        ctc_loss_reduction="mean",
        pad_token_id=0,
    )
    b, n = batch or _pick(size, 4, 8), _pick(size, 1600, 16000 * 10)
    g = torch.Generator().manual_seed(0)
    inputs = {
        "input_values": torch.randn(b, n, generator=g),
        "labels": torch.randint(1, 32, (b, _pick(size, 8, 200)), generator=g),
    }
    return _training(tf.Wav2Vec2ForCTC(cfg)), inputs


def timm_vit(size: str = "tiny", batch: int | None = None):
    import timm

    name = _pick(size, "vit_tiny_patch16_224", "vit_large_patch16_224")
    model = timm.create_model(name, pretrained=False, num_classes=10)
    b = batch or _pick(size, 16, 64)
    return model.train(), {"x": _images(b, 3, 224)["pixel_values"]}


ZOO: tuple[ZooModel, ...] = (
    ZooModel("llama", "decoder", llama),
    ZooModel("qwen2", "decoder", qwen2),
    ZooModel("mistral", "decoder", mistral),
    ZooModel("gemma2", "decoder", gemma2),
    ZooModel("phi3", "decoder", phi3),
    ZooModel("mixtral", "moe", mixtral),
    ZooModel("qwen2_moe", "moe", qwen2_moe),
    ZooModel("bert", "encoder", bert),
    ZooModel("roberta", "encoder", roberta),
    ZooModel("t5", "encoder-decoder", t5),
    ZooModel("bart", "encoder-decoder", bart),
    ZooModel("vit", "vision", vit),
    ZooModel("resnet", "conv", resnet),
    ZooModel("convnext", "conv", convnext),
    ZooModel("swin", "vision", swin),
    ZooModel("dit", "diffusion", dit, needs="diffusers"),
    ZooModel("sd3", "diffusion", sd3, needs="diffusers"),
    ZooModel("whisper", "speech", whisper),
    ZooModel("wav2vec2", "speech", wav2vec2),
    ZooModel("timm_vit", "vision", timm_vit, needs="timm"),
)
EXTRA: tuple[ZooModel, ...] = (ZooModel("mamba2", "ssm", mamba2),)  # by name only
BY_NAME = {m.name: m for m in (*ZOO, *EXTRA)}
