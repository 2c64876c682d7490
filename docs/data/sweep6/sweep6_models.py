"""Sweep 6: new tiny architectures for the memopt robustness sweep (random weights, dropout off).

Each builder: build(size="tiny", batch=None) -> (model, inputs_dict)."""
from __future__ import annotations

import sys

sys.path.insert(0, __import__("os").path.abspath(__import__("os").path.join(__import__("os").path.dirname(__file__), "../../..")))

import torch

from benchmarks.zoo_models import _IDS, ZooModel, _lm_inputs, _tf, _training  # noqa: E402
from benchmarks.zoo_wide import _config  # noqa: E402  (dropouts off)

B = 2


def _g():
    return torch.Generator().manual_seed(0)


# ----------------------------------------------------------------- decoders / MoE / hybrid
def _dec(cls, cfg_cls, seq=64, **kw):
    def build(size="tiny", batch=None):
        cfg = _config(cfg_cls, vocab_size=128, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _lm_inputs(128, batch or B, seq)

    build.__name__ = cls
    return build


_D = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, max_position_embeddings=256, **_IDS)

qwen3 = _dec("Qwen3ForCausalLM", "Qwen3Config", **_D, head_dim=16)
qwen3_moe = _dec(
    "Qwen3MoeForCausalLM", "Qwen3MoeConfig", **_D, head_dim=16, num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
    output_router_logits=True,
)
olmoe = _dec(
    "OlmoeForCausalLM", "OlmoeConfig", **_D, num_experts=4, num_experts_per_tok=2,
    output_router_logits=True,
)
exaone4 = _dec(
    "Exaone4ForCausalLM", "Exaone4Config", **_D, sliding_window=16,
    layer_types=["sliding_attention", "full_attention"],
)
lfm2 = _dec(
    "Lfm2ForCausalLM", "Lfm2Config", hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, layer_types=["conv", "full_attention"], conv_L_cache=3,
    block_auto_adjust_ff_dim=False, **_IDS,
)
smollm3 = _dec("SmolLM3ForCausalLM", "SmolLM3Config", **_D, no_rope_layer_interval=2)


# ----------------------------------------------------------------- encoders / speech
def albert(size="tiny", batch=None):
    cfg = _config("AlbertConfig", vocab_size=128, embedding_size=32, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_hidden_groups=1, max_position_embeddings=128)
    return _training(_tf().AlbertForMaskedLM(cfg)), _lm_inputs(128, batch or B, 64)


def xlnet(size="tiny", batch=None):
    cfg = _config("XLNetConfig", vocab_size=128, d_model=64, n_layer=2, n_head=4, d_inner=128,
                  mem_len=None, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return _training(_tf().XLNetLMHeadModel(cfg)), _lm_inputs(128, batch or B, 64)


def esm(size="tiny", batch=None):
    cfg = _config("EsmConfig", vocab_size=33, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=130,
                  position_embedding_type="rotary", pad_token_id=1, mask_token_id=32)
    g, b = _g(), batch or B
    ids = torch.randint(4, 30, (b, 64), generator=g)
    return _training(_tf().EsmForMaskedLM(cfg)), {"input_ids": ids, "labels": ids}


def wavlm(size="tiny", batch=None):
    cfg = _config("WavLMConfig", vocab_size=32, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, conv_dim=(32, 32, 32),
                  conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=4, num_buckets=32, max_bucket_distance=64,
                  mask_time_prob=0.0, mask_feature_prob=0.0, layerdrop=0.0,
                  ctc_loss_reduction="mean", pad_token_id=0)
    g, b = _g(), batch or B
    return _training(_tf().WavLMForCTC(cfg)), {
        "input_values": torch.randn(b, 4000, generator=g),
        "labels": torch.randint(1, 32, (b, 20), generator=g),
    }


# ----------------------------------------------------------------- vision
def _img(b, n_labels=10, size=64):
    g = _g()
    return {"pixel_values": torch.randn(b, 3, size, size, generator=g),
            "labels": torch.randint(0, n_labels, (b,), generator=g)}


def convnextv2(size="tiny", batch=None):
    cfg = _config("ConvNextV2Config", num_channels=3, patch_size=4, num_stages=2,
                  hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, drop_path_rate=0.0)
    return _training(_tf().ConvNextV2ForImageClassification(cfg)), _img(batch or B)


def efficientnet(size="tiny", batch=None):
    cfg = _config("EfficientNetConfig", image_size=64, width_coefficient=0.25,
                  depth_coefficient=0.25, num_labels=10, hidden_dim=320, dropout_rate=0.0,
                  drop_connect_rate=0.0)
    return _training(_tf().EfficientNetForImageClassification(cfg)), _img(batch or B)


def levit(size="tiny", batch=None):
    cfg = _config("LevitConfig", image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2],
                  depths=[1, 1, 1], key_dim=[8, 8, 8], patch_size=16, num_labels=10)
    return _training(_tf().LevitForImageClassification(cfg)), _img(batch or B)


def swinv2(size="tiny", batch=None):
    cfg = _config("Swinv2Config", image_size=32, patch_size=2, embed_dim=16, depths=[1, 1],
                  num_heads=[1, 2], window_size=4, num_labels=10, drop_path_rate=0.0)
    return _training(_tf().Swinv2ForImageClassification(cfg)), _img(batch or B, size=32)


# ----------------------------------------------------------------- vision-language
def blip2(size="tiny", batch=None):
    tf = _tf()
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=32, patch_size=8)
    qformer = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=2, encoder_hidden_size=32, vocab_size=64,
                   cross_attention_frequency=1)
    text = dict(model_type="opt", hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                num_attention_heads=4, vocab_size=160, max_position_embeddings=128,
                word_embed_proj_dim=64, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    cfg = tf.Blip2Config(vision_config=vision, qformer_config=qformer, text_config=text,
                         num_query_tokens=4, image_token_index=150)
    for sub in (cfg.vision_config, cfg.qformer_config, cfg.text_config):
        for k in ("dropout", "attention_dropout", "hidden_dropout_prob",
                  "attention_probs_dropout_prob"):
            if isinstance(getattr(sub, k, None), float):
                setattr(sub, k, 0.0)
    g, b = _g(), batch or B
    ids = torch.randint(3, 128, (b, 24), generator=g)
    ids[:, :4] = 150  # the query tokens' places
    labels = ids.clone()
    labels[:, :4] = -100
    return _training(tf.Blip2ForConditionalGeneration(cfg)), {
        "input_ids": ids, "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "labels": labels,
    }


# ----------------------------------------------------------------- diffusers
def hunyuan_dit(size="tiny", batch=None):
    import diffusers

    model = diffusers.HunyuanDiT2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4,
        patch_size=2, sample_size=8, hidden_size=32, num_layers=2, mlp_ratio=2.0,
        cross_attention_dim=32, cross_attention_dim_t5=32, pooled_projection_dim=16,
        text_len=8, text_len_t5=8, use_style_cond_and_image_meta_size=False,
    )
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 8, 8, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g).float(),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "text_embedding_mask": torch.ones(b, 8, dtype=torch.long),
        "encoder_hidden_states_t5": torch.randn(b, 8, 32, generator=g),
        "text_embedding_mask_t5": torch.ones(b, 8, dtype=torch.long),
    }


def latte(size="tiny", batch=None):
    import diffusers

    model = diffusers.LatteTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
        num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=32, caption_channels=32,
        norm_type="ada_norm_single", video_length=2,
    )
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 2, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
    }


def autoencoder_dc(size="tiny", batch=None):
    import diffusers

    model = diffusers.AutoencoderDC(
        in_channels=3, latent_channels=8, attention_head_dim=8,
        encoder_block_types=("ResBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(16, 32), decoder_block_out_channels=(16, 32),
        encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
        encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
        upsample_block_type="interpolate", downsample_block_type="Conv",
        decoder_norm_types="rms_norm", decoder_act_fns="silu",
    )
    g, b = _g(), batch or B
    return model.train(), {"sample": torch.randn(b, 3, 32, 32, generator=g)}


NEW = {
    e.name: e
    for e in (
        ZooModel("qwen3", "decoder", qwen3),
        ZooModel("qwen3_moe", "moe", qwen3_moe),
        ZooModel("olmoe", "moe", olmoe),
        ZooModel("exaone4", "decoder", exaone4),
        ZooModel("lfm2", "hybrid", lfm2),
        ZooModel("smollm3", "decoder", smollm3),
        ZooModel("albert", "encoder", albert),
        ZooModel("xlnet", "encoder", xlnet),
        ZooModel("esm", "encoder", esm),
        ZooModel("wavlm", "speech", wavlm),
        ZooModel("convnextv2", "conv", convnextv2),
        ZooModel("efficientnet", "conv", efficientnet),
        ZooModel("levit", "vision", levit),
        ZooModel("swinv2", "vision", swinv2),
        ZooModel("blip2", "multimodal", blip2),
        ZooModel("hunyuan_dit", "diffusion", hunyuan_dit, needs="diffusers"),
        ZooModel("latte", "diffusion", latte, needs="diffusers"),
        ZooModel("autoencoder_dc", "diffusion", autoencoder_dc, needs="diffusers"),
    )
}
