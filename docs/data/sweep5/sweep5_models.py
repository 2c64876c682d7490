"""New tiny architectures for the memopt robustness sweep (random weights, dropout off).

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


def _s2s(vocab, b, seq):
    g = _g()
    return {
        "input_ids": torch.randint(2, vocab, (b, seq), generator=g),
        "labels": torch.randint(2, vocab, (b, seq // 2), generator=g),
    }


# ----------------------------------------------------------------- seq2seq
def pegasus(size="tiny", batch=None):
    cfg = _config(
        "PegasusConfig", vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=128, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0,
    )
    return _training(_tf().PegasusForConditionalGeneration(cfg)), _s2s(128, batch or B, 64)


def mt5(size="tiny", batch=None):
    cfg = _config(
        "MT5Config", vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2,
        num_decoder_layers=2, num_heads=4, dropout_rate=0.0, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1,
    )
    return _training(_tf().MT5ForConditionalGeneration(cfg)), _s2s(128, batch or B, 64)


def led(size="tiny", batch=None):
    cfg = _config(
        "LEDConfig", vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, attention_window=[16, 16], max_encoder_position_embeddings=128,
        max_decoder_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2,
    )
    inputs = _s2s(128, batch or B, 64)
    return _training(_tf().LEDForConditionalGeneration(cfg)), inputs


# ----------------------------------------------------------------- vision
def segformer(size="tiny", batch=None):
    cfg = _config(
        "SegformerConfig", num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
        hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
        mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5,
    )
    g, b = _g(), batch or B
    inputs = {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g),
        "labels": torch.randint(0, 5, (b, 64, 64), generator=g),
    }
    return _training(_tf().SegformerForSemanticSegmentation(cfg)), inputs


def mobilevit(size="tiny", batch=None):
    cfg = _config(
        "MobileViTConfig", image_size=64, patch_size=2, hidden_sizes=[32, 48, 64],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_attention_heads=2, expand_ratio=2.0,
        num_labels=10, problem_type="single_label_classification",
    )
    g, b = _g(), batch or B
    inputs = {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g),
        "labels": torch.randint(0, 10, (b,), generator=g),
    }
    return _training(_tf().MobileViTForImageClassification(cfg)), inputs


_TXT = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=32)
_VIS = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            image_size=32, patch_size=8)


def clip(size="tiny", batch=None):
    tf = _tf()
    cfg = tf.CLIPConfig(text_config=dict(_TXT), vision_config=dict(_VIS), projection_dim=32)
    g, b = _g(), batch or B
    inputs = {
        "input_ids": torch.randint(3, 128, (b, 16), generator=g),
        "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "return_loss": True,
    }
    return _training(tf.CLIPModel(cfg)), inputs


def siglip(size="tiny", batch=None):
    tf = _tf()
    cfg = tf.SiglipConfig(text_config=dict(_TXT), vision_config=dict(_VIS))
    g, b = _g(), batch or B
    inputs = {
        "input_ids": torch.randint(3, 128, (b, 16), generator=g),
        "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "return_loss": True,
    }
    return _training(tf.SiglipModel(cfg)), inputs


# ----------------------------------------------------------------- multimodal
def llava(size="tiny", batch=None):
    tf = _tf()
    text = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
                max_position_embeddings=128, **_IDS)
    vision = dict(model_type="clip_vision_model", **_VIS)
    cfg = tf.LlavaConfig(vision_config=vision, text_config=text, image_token_index=150,
                         projector_hidden_act="gelu", vision_feature_layer=-1,
                         vision_feature_select_strategy="default")
    g, b = _g(), batch or B
    n_img = (32 // 8) ** 2  # 16 patch tokens (CLS dropped)
    ids = torch.randint(1, 128, (b, 48), generator=g)
    ids[:, 1:1 + n_img] = 150
    labels = ids.clone()
    labels[:, 1:1 + n_img] = -100
    inputs = {"input_ids": ids, "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
              "labels": labels}
    return _training(tf.LlavaForConditionalGeneration(cfg)), inputs


# ----------------------------------------------------------------- decoders / hybrids
def _dec(cls, cfg_cls, seq=64, **kw):
    def build(size="tiny", batch=None):
        cfg = _config(cfg_cls, vocab_size=128, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _lm_inputs(128, batch or B, seq)

    build.__name__ = cls
    return build


_D = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
          max_position_embeddings=256)

jamba = _dec(
    "JambaForCausalLM", "JambaConfig", **_D, num_key_value_heads=2, num_experts=4,
    num_experts_per_tok=2, expert_layer_period=2, expert_layer_offset=1, attn_layer_period=2,
    attn_layer_offset=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8,
    use_mamba_kernels=False, **_IDS,
)
rwkv = _dec(
    "RwkvForCausalLM", "RwkvConfig", seq=32, context_length=64, hidden_size=64,
    num_hidden_layers=2, attention_hidden_size=64, intermediate_size=128, bos_token_id=0,
    eos_token_id=0,
)
starcoder2 = _dec(
    "Starcoder2ForCausalLM", "Starcoder2Config", **_D, num_key_value_heads=2, sliding_window=16,
    **_IDS,
)
persimmon = _dec("PersimmonForCausalLM", "PersimmonConfig", **_D, **_IDS)
nemotron = _dec(
    "NemotronForCausalLM", "NemotronConfig", **_D, num_key_value_heads=2, head_dim=16, **_IDS
)
deepseek_v3 = _dec(
    "DeepseekV3ForCausalLM", "DeepseekV3Config", **_D, moe_intermediate_size=32,
    first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
    n_shared_experts=1, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, **_IDS,
)


# ----------------------------------------------------------------- diffusers
def pixart(size="tiny", batch=None):
    import diffusers

    model = diffusers.PixArtTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
        num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=32, caption_channels=32,
        norm_num_groups=8, use_additional_conditions=False,
    )
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
        "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
    }


def cogvideox(size="tiny", batch=None):
    import diffusers

    model = diffusers.CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
        text_embed_dim=32, time_embed_dim=32, max_text_seq_length=8,
        temporal_compression_ratio=4,
    )
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 3, 4, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
    }


def unet3d(size="tiny", batch=None):
    import diffusers

    model = diffusers.UNet3DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
        up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8,
    )
    g, b = _g(), batch or B
    return model.train(), {
        "sample": torch.randn(b, 4, 2, 16, 16, generator=g),
        "timestep": torch.tensor(10),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
    }


def sana(size="tiny", batch=None):
    import diffusers

    model = diffusers.SanaTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16,
        num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=16,
        cross_attention_dim=32, caption_channels=32, sample_size=8, patch_size=1,
    )
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
    }


NEW = {
    e.name: e
    for e in (
        ZooModel("pegasus", "encoder-decoder", pegasus),
        ZooModel("mt5", "encoder-decoder", mt5),
        ZooModel("led", "encoder-decoder", led),
        ZooModel("segformer", "vision", segformer),
        ZooModel("mobilevit", "vision", mobilevit),
        ZooModel("clip", "multimodal", clip),
        ZooModel("siglip", "multimodal", siglip),
        ZooModel("llava", "multimodal", llava),
        ZooModel("jamba", "hybrid", jamba),
        ZooModel("rwkv", "rnn", rwkv),
        ZooModel("starcoder2", "decoder", starcoder2),
        ZooModel("persimmon", "decoder", persimmon),
        ZooModel("nemotron", "decoder", nemotron),
        ZooModel("deepseek_v3", "moe", deepseek_v3),
        ZooModel("pixart", "diffusion", pixart, needs="diffusers"),
        ZooModel("cogvideox", "diffusion", cogvideox, needs="diffusers"),
        ZooModel("unet3d", "diffusion", unet3d, needs="diffusers"),
        ZooModel("sana", "diffusion", sana, needs="diffusers"),
    )
}
