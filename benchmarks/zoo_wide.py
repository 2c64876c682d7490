"""The wide zoo: thirty more architectures at tiny sizes, for correctness and exact estimates
on models the main zoo (benchmarks/zoo_models.py) and the benchmarks never shaped.

Same protocol as the main zoo (``build(size="tiny", batch=None) -> (model, inputs)``, random
weights from configs, dropout off), tiny sizes only: these models are checked, not timed.
Families: decoder LLMs (GPT-NeoX, Falcon, OPT, GPT-J, BLOOM, GPT-2, StableLM, OLMo2, Cohere,
Granite, Phi, Gemma3), a state-space model (Mamba), masked-LM encoders (DeBERTa-v2,
DistilBERT, ALBERT, ELECTRA), vision transformers (DeiT, BEiT, DINOv2, LeViT), conv nets
(ConvNeXtV2, RegNet, MobileNetV2, EfficientNet, PoolFormer) and diffusers models (UNet2D, a
text-conditioned UNet, the KL autoencoder, Flux's transformer). ::

    python benchmarks/zoo.py --wide                      # all, CPU; the table in docs/zoo.md
    python benchmarks/zoo.py --models mobilenet_v2,falcon
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.zoo_models import _IDS, ZooModel, _images, _lm_inputs, _tf, _training

_DROPOUTS = (
    "attention_dropout",
    "hidden_dropout",
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout",
    "classifier_dropout",
    "activation_dropout",
    "drop_path_rate",
)


def _config(cfg_cls: str, **kw: Any):
    cfg = getattr(_tf(), cfg_cls)(**kw)
    for k in _DROPOUTS:
        if isinstance(getattr(cfg, k, None), float):
            setattr(cfg, k, 0.0)
    return cfg


def _lm(cls: str, cfg_cls: str, batch: int = 4, seq: int = 64, **kw: Any):
    """A language model (causal or masked) trained on its own ids as labels."""

    def build(size: str = "tiny", b: int | None = None):
        cfg = _config(cfg_cls, vocab_size=128, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _lm_inputs(128, b or batch, seq)

    return build


def _img(cls: str, cfg_cls: str, side: int = 32, batch: int = 8, **kw: Any):
    """An image classifier on ``batch`` random ``side`` x ``side`` images, 10 classes."""

    def build(size: str = "tiny", b: int | None = None):
        cfg = _config(cfg_cls, num_labels=10, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _images(b or batch, 3, side)

    return build


_DEC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
_GQA = dict(_DEC, num_key_value_heads=2)
_ENC = dict(_DEC, **_IDS)
_VIT = dict(_DEC, image_size=32, patch_size=8)
_STAGES = dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])


def _seed() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def unet2d(size: str = "tiny", batch: int | None = None):
    import diffusers

    model = diffusers.UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(16, 32),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
    )
    sample = torch.randn(batch or 4, 3, 16, 16, generator=_seed())
    return model.train(), {"sample": sample, "timestep": torch.tensor(10)}


def unet_text(size: str = "tiny", batch: int | None = None):
    import diffusers

    model = diffusers.UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=8,
        attention_head_dim=8,
    )
    b, g = batch or 2, _seed()
    return model.train(), {
        "sample": torch.randn(b, 4, 16, 16, generator=g),
        "timestep": torch.tensor(10),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
    }


def vae(size: str = "tiny", batch: int | None = None):
    import diffusers

    model = diffusers.AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=(16, 32),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=4,
        norm_num_groups=8,
    )
    return model.train(), {"sample": torch.randn(batch or 2, 3, 32, 32, generator=_seed())}


def flux(size: str = "tiny", batch: int | None = None):
    import diffusers

    model = diffusers.FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=(4, 6, 6),
    )
    b, g = batch or 2, _seed()
    return model.train(), {
        "hidden_states": torch.randn(b, 64, 16, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "pooled_projections": torch.randn(b, 32, generator=g),
        "timestep": torch.ones(b),
        "img_ids": torch.zeros(64, 3),
        "txt_ids": torch.zeros(8, 3),
    }


ZOO_WIDE: tuple[ZooModel, ...] = (
    ZooModel("gpt_neox", "decoder", _lm("GPTNeoXForCausalLM", "GPTNeoXConfig", **_DEC)),
    ZooModel(
        "falcon",
        "decoder",
        _lm(
            "FalconForCausalLM",
            "FalconConfig",
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
        ),
    ),
    ZooModel(
        "opt",
        "decoder",
        _lm(
            "OPTForCausalLM",
            "OPTConfig",
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=128,
            word_embed_proj_dim=64,
            **_IDS,
        ),
    ),
    ZooModel(
        "gptj",
        "decoder",
        _lm("GPTJForCausalLM", "GPTJConfig", n_embd=64, n_layer=2, n_head=4, rotary_dim=8, **_IDS),
    ),
    ZooModel(
        "bloom",
        "decoder",
        _lm("BloomForCausalLM", "BloomConfig", hidden_size=64, n_layer=2, n_head=4),
    ),
    ZooModel(
        "gpt2",
        "decoder",
        _lm("GPT2LMHeadModel", "GPT2Config", n_embd=64, n_layer=2, n_head=4, **_IDS),
    ),
    ZooModel("stablelm", "decoder", _lm("StableLmForCausalLM", "StableLmConfig", **_GQA, **_IDS)),
    ZooModel("olmo2", "decoder", _lm("Olmo2ForCausalLM", "Olmo2Config", **_GQA, **_IDS)),
    ZooModel("cohere", "decoder", _lm("CohereForCausalLM", "CohereConfig", **_GQA, **_IDS)),
    ZooModel("granite", "decoder", _lm("GraniteForCausalLM", "GraniteConfig", **_GQA)),
    ZooModel("phi", "decoder", _lm("PhiForCausalLM", "PhiConfig", **_DEC)),
    ZooModel(
        "gemma3",
        "decoder",
        _lm("Gemma3ForCausalLM", "Gemma3TextConfig", **_GQA, head_dim=16, sliding_window=32),
    ),
    ZooModel(
        "mamba",
        "state-space",
        _lm(
            "MambaForCausalLM",
            "MambaConfig",
            hidden_size=64,
            num_hidden_layers=2,
            state_size=8,
            **_IDS,
        ),
    ),
    ZooModel("deberta_v2", "encoder", _lm("DebertaV2ForMaskedLM", "DebertaV2Config", **_DEC)),
    ZooModel(
        "distilbert",
        "encoder",
        _lm(
            "DistilBertForMaskedLM",
            "DistilBertConfig",
            dim=64,
            n_layers=2,
            n_heads=4,
            hidden_dim=128,
        ),
    ),
    ZooModel(
        "albert", "encoder", _lm("AlbertForMaskedLM", "AlbertConfig", **_ENC, embedding_size=32)
    ),
    ZooModel(
        "electra", "encoder", _lm("ElectraForMaskedLM", "ElectraConfig", **_ENC, embedding_size=32)
    ),
    ZooModel("deit", "vision", _img("DeiTForImageClassification", "DeiTConfig", **_VIT)),
    ZooModel("beit", "vision", _img("BeitForImageClassification", "BeitConfig", **_VIT)),
    ZooModel(
        "dinov2",
        "vision",
        _img(
            "Dinov2ForImageClassification",
            "Dinov2Config",
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            mlp_ratio=2,
            image_size=32,
            patch_size=8,
        ),
    ),
    ZooModel(
        "levit",
        "vision",
        _img(
            "LevitForImageClassification",
            "LevitConfig",
            side=224,
            image_size=224,
            hidden_sizes=[32, 48, 64],
            num_attention_heads=[2, 2, 2],
            depths=[1, 1, 1],
            key_dim=[8, 8, 8],
        ),
    ),
    ZooModel(
        "convnextv2",
        "conv",
        _img("ConvNextV2ForImageClassification", "ConvNextV2Config", **_STAGES),
    ),
    ZooModel(
        "regnet",
        "conv",
        _img(
            "RegNetForImageClassification",
            "RegNetConfig",
            **_STAGES,
            groups_width=8,
            embedding_size=16,
        ),
    ),
    ZooModel(
        "mobilenet_v2",
        "conv",
        _img(
            "MobileNetV2ForImageClassification",
            "MobileNetV2Config",
            depth_multiplier=0.25,
            image_size=32,
        ),
    ),
    # width 1.0: transformers' EfficientNet sizes its last norm wrongly at other widths
    ZooModel(
        "efficientnet",
        "conv",
        _img(
            "EfficientNetForImageClassification",
            "EfficientNetConfig",
            width_coefficient=1.0,
            depth_coefficient=0.5,
            image_size=32,
            hidden_dim=1280,
        ),
    ),
    ZooModel(
        "poolformer",
        "conv",
        _img("PoolFormerForImageClassification", "PoolFormerConfig", **_STAGES),
    ),
    ZooModel("unet2d", "diffusion", unet2d, needs="diffusers"),
    ZooModel("unet_text", "diffusion", unet_text, needs="diffusers"),
    ZooModel("vae", "diffusion", vae, needs="diffusers"),
    ZooModel("flux", "diffusion", flux, needs="diffusers"),
)
