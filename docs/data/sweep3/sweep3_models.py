"""Sweep 3 builders: build(size="tiny", batch=None) -> (model, inputs). Random weights, tiny."""

from __future__ import annotations

import torch

from benchmarks.zoo_models import _IDS, _images, _lm_inputs, _tf, _training

_DROPOUTS = (
    "attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "classifier_dropout",
    "activation_dropout", "drop_path_rate", "attention_probs_dropout_prob", "residual_dropout",
    "ffn_dropout", "positional_dropout", "path_dropout", "head_dropout", "attn_dropout",
    "feat_proj_dropout", "final_dropout", "layerdrop", "encoder_layerdrop", "decoder_layerdrop",
    "mask_time_prob", "speech_decoder_prenet_dropout", "embd_pdrop", "ff_dropout",
    "activation_dropout", "hidden_dropout_prob", "classifier_dropout_prob",
)


def _g():
    return torch.Generator().manual_seed(0)


def _config(cfg_cls: str, **kw):
    cfg = getattr(_tf(), cfg_cls)(**kw)
    for k in _DROPOUTS:
        if isinstance(getattr(cfg, k, None), float):
            setattr(cfg, k, 0.0)
    return cfg


def _lm(cls: str, cfg_cls: str, batch: int = 4, seq: int = 64, **kw):
    def build(size: str = "tiny", b: int | None = None):
        cfg = _config(cfg_cls, vocab_size=128, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _lm_inputs(128, b or batch, seq)

    return build


_DEC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=256, **_IDS)
_GQA = dict(_DEC, num_key_value_heads=2)

starcoder2 = _lm("Starcoder2ForCausalLM", "Starcoder2Config", **_GQA)
phimoe = _lm("PhimoeForCausalLM", "PhimoeConfig", num_local_experts=4, num_experts_per_tok=2, **_GQA)
granitemoe = _lm("GraniteMoeForCausalLM", "GraniteMoeConfig", num_local_experts=4,
                 num_experts_per_tok=2, **_GQA)
persimmon = _lm("PersimmonForCausalLM", "PersimmonConfig", **_DEC)
gemma = _lm("GemmaForCausalLM", "GemmaConfig", head_dim=16, **_GQA)
glm4 = _lm("Glm4ForCausalLM", "Glm4Config", head_dim=16, **_GQA)
helium = _lm("HeliumForCausalLM", "HeliumConfig", head_dim=16, **_GQA)
diffllama = _lm("DiffLlamaForCausalLM", "DiffLlamaConfig", **_GQA)
squeezebert = _lm("SqueezeBertForMaskedLM", "SqueezeBertConfig", embedding_size=64,
                  q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
                  intermediate_groups=2, output_groups=2, **_DEC)
_funnel = _lm("FunnelForMaskedLM", "FunnelConfig", block_sizes=[1, 1], d_model=64, n_head=4,
              d_head=16, d_inner=128, **_IDS)


def funnel(size="tiny", batch=None):
    # labels other than the ids: with labels = ids the untrained model copies its input
    # (upsampling residual), loss ~3e-7 and near-zero gradients
    m, inp = _funnel(size, batch)
    inp["labels"] = torch.randint(1, 128, inp["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    return m, inp
rwkv = _lm("RwkvForCausalLM", "RwkvConfig", hidden_size=64, num_hidden_layers=2,
           attention_hidden_size=64, intermediate_size=128, context_length=128, **_IDS)
dbrx = _lm("DbrxForCausalLM", "DbrxConfig", d_model=64, n_heads=4, n_layers=2, max_seq_len=256,
           attn_config=dict(kv_n_heads=2, clip_qkv=8.0, rope_theta=10000.0),
           ffn_config=dict(ffn_hidden_size=128, moe_num_experts=4, moe_top_k=2), **_IDS)
bamba = _lm("BambaForCausalLM", "BambaConfig", batch=2, seq=32, mamba_n_heads=8,
            mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8, mamba_expand=2,
            mamba_chunk_size=8, mamba_d_conv=4, attn_layer_indices=[1], **_GQA)
zamba2 = _lm("Zamba2ForCausalLM", "Zamba2Config", batch=2, seq=32, mamba_d_state=8,
             mamba_headdim=16, n_mamba_heads=8, mamba_ngroups=1, mamba_expand=2, chunk_size=8,
             num_hidden_layers=2, hybrid_layer_ids=[1], layers_block_type=["mamba", "hybrid"],
             hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
             intermediate_size=128, attention_head_dim=16, max_position_embeddings=256,
             use_mem_rope=False, adapter_rank=8, **_IDS)


def mbart(size="tiny", batch=None):
    cfg = _config("MBartConfig", vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                  decoder_ffn_dim=128, max_position_embeddings=256, decoder_start_token_id=2,
                  **_IDS)
    inp = _lm_inputs(128, batch or 4, 48)
    return _training(_tf().MBartForConditionalGeneration(cfg)), inp


_VIT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            image_size=32, patch_size=8)


def vitmae(size="tiny", batch=None):
    cfg = _config("ViTMAEConfig", decoder_hidden_size=32, decoder_num_hidden_layers=1,
                  decoder_num_attention_heads=4, decoder_intermediate_size=64, mask_ratio=0.75,
                  **_VIT)
    g = _g()
    b = batch or 8
    x = torch.randn(b, 3, 32, 32, generator=g)
    # the random masking's noise as an input: compiled and eager RNG streams differ
    noise = torch.rand(b, 16, generator=g)
    return _training(_tf().ViTMAEForPreTraining(cfg)), {"pixel_values": x, "noise": noise}


def _img(cls, cfg_cls, side=32, batch=8, **kw):
    def build(size="tiny", b=None):
        cfg = _config(cfg_cls, num_labels=10, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _images(b or batch, 3, side)

    return build


data2vec_vision = _img("Data2VecVisionForImageClassification", "Data2VecVisionConfig",
                       use_relative_position_bias=True, **_VIT)
pvt_v2 = _img("PvtV2ForImageClassification", "PvtV2Config", side=64, depths=[1, 1, 1, 1],
              hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 4, 8],
              sr_ratios=[8, 4, 2, 1], mlp_ratios=[2, 2, 2, 2])
focalnet = _img("FocalNetForImageClassification", "FocalNetConfig", side=64, embed_dim=16,
                depths=[1, 1, 1, 1], patch_size=4)
hiera = _img("HieraForImageClassification", "HieraConfig", side=64, embed_dim=16,
             depths=[1, 1, 1, 1], num_heads=[1, 2, 4, 8], patch_size=[7, 7],
             patch_stride=[4, 4], patch_padding=[3, 3], query_stride=[2, 2],
             masked_unit_size=[8, 8], image_size=[64, 64])


def wav2vec2_conformer(size="tiny", batch=None):
    cfg = _config("Wav2Vec2ConformerConfig", vocab_size=32, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128,
                  conv_dim=(32, 32, 32), conv_stride=(5, 4, 2), conv_kernel=(10, 4, 2),
                  num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                  conformer_conv_depthwise_kernel_size=7, position_embeddings_type="rotary",
                  ctc_loss_reduction="mean", pad_token_id=0)
    g = _g()
    b = batch or 2
    return _training(_tf().Wav2Vec2ConformerForCTC(cfg)), {
        "input_values": torch.randn(b, 4000, generator=g),
        "labels": torch.randint(1, 32, (b, 12), generator=g),
    }


def speecht5(size="tiny", batch=None):
    cfg = _config("SpeechT5Config", vocab_size=64, hidden_size=64, encoder_layers=2,
                  decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=128, decoder_ffn_dim=128, conv_dim=(32, 32, 32),
                  conv_stride=(5, 4, 2), conv_kernel=(10, 4, 2), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=4, max_text_positions=128, **_IDS,
                  decoder_start_token_id=2)
    g = _g()
    b = batch or 2
    return _training(_tf().SpeechT5ForSpeechToText(cfg)), {
        "input_values": torch.randn(b, 4000, generator=g),
        "labels": torch.randint(3, 64, (b, 12), generator=g),
    }


def patchtst(size="tiny", batch=None):
    cfg = _config("PatchTSTConfig", num_input_channels=3, context_length=64, patch_length=8,
                  patch_stride=8, prediction_length=16, d_model=64, num_attention_heads=4,
                  num_hidden_layers=2, ffn_dim=128)
    g = _g()
    b = batch or 8
    return _training(_tf().PatchTSTForPrediction(cfg)), {
        "past_values": torch.randn(b, 64, 3, generator=g),
        "future_values": torch.randn(b, 16, 3, generator=g),
    }


# ---- diffusers ----

def unet1d(size="tiny", batch=None):
    import diffusers

    # the default (Dance Diffusion style) config: fourier time embedding, no-skip blocks
    model = diffusers.UNet1DModel(sample_size=64, in_channels=2, out_channels=2, extra_in_channels=64,
                                  block_out_channels=(32, 32, 64))
    return model.train(), {"sample": torch.randn(batch or 4, 2, 64, generator=_g()),
                           "timestep": torch.tensor([10])}


def auraflow(size="tiny", batch=None):
    import diffusers

    model = diffusers.AuraFlowTransformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, num_mmdit_layers=1,
        num_single_dit_layers=2, attention_head_dim=16, num_attention_heads=4,
        joint_attention_dim=32, caption_projection_dim=64, out_channels=4, pos_embed_max_size=64,
    )
    b, g = batch or 2, _g()
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 16, 16, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.tensor([10.0] * b),
    }


def lumina2(size="tiny", batch=None):
    import diffusers

    model = diffusers.Lumina2Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, out_channels=4, hidden_size=64,
        num_layers=2, num_refiner_layers=1, num_attention_heads=4, num_kv_heads=2,
        multiple_of=16, ffn_dim_multiplier=None, norm_eps=1e-5, scaling_factor=1.0,
        axes_dim_rope=(4, 6, 6), axes_lens=(64, 32, 32), cap_feat_dim=32,
    )
    b, g = batch or 2, _g()
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 16, 16, generator=g),
        "timestep": torch.tensor([0.5] * b),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "encoder_attention_mask": torch.ones(b, 8, dtype=torch.bool),
    }


def wan(size="tiny", batch=None):
    import diffusers

    model = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4,
        out_channels=4, text_dim=32, freq_dim=32, ffn_dim=128, num_layers=2,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=64,
    )
    b, g = batch or 1, _g()
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 3, 16, 16, generator=g),
        "timestep": torch.tensor([10] * b),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
    }


def ltx(size="tiny", batch=None):
    import diffusers

    model = diffusers.LTXVideoTransformer3DModel(
        in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4,
        attention_head_dim=16, cross_attention_dim=64, num_layers=2, caption_channels=32,
    )
    b, g = batch or 1, _g()
    f, h, w = 3, 8, 8
    return model.train(), {
        "hidden_states": torch.randn(b, f * h * w, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.tensor([10] * b),
        "encoder_attention_mask": torch.ones(b, 8, dtype=torch.long),
        "num_frames": f, "height": h, "width": w,
    }


MODELS = {
    "starcoder2": ("decoder", starcoder2, "transformers"),
    "phimoe": ("moe", phimoe, "transformers"),
    "mbart": ("encoder-decoder", mbart, "transformers"),
    "squeezebert": ("encoder", squeezebert, "transformers"),
    "funnel": ("encoder", funnel, "transformers"),
    "rwkv": ("rnn", rwkv, "transformers"),
    "granitemoe": ("moe", granitemoe, "transformers"),
    "dbrx": ("moe", dbrx, "transformers"),
    "persimmon": ("decoder", persimmon, "transformers"),
    "gemma": ("decoder", gemma, "transformers"),
    "glm4": ("decoder", glm4, "transformers"),
    "helium": ("decoder", helium, "transformers"),
    "diffllama": ("decoder", diffllama, "transformers"),
    "bamba": ("hybrid", bamba, "transformers"),
    "zamba2": ("hybrid", zamba2, "transformers"),
    "vitmae": ("vision", vitmae, "transformers"),
    "data2vec_vision": ("vision", data2vec_vision, "transformers"),
    "pvt_v2": ("vision", pvt_v2, "transformers"),
    "focalnet": ("vision", focalnet, "transformers"),
    "hiera": ("vision", hiera, "transformers"),
    "speecht5": ("speech", speecht5, "transformers"),
    "wav2vec2_conformer": ("speech", wav2vec2_conformer, "transformers"),
    "patchtst": ("time-series", patchtst, "transformers"),
    "unet1d": ("diffusion", unet1d, "diffusers"),
    "auraflow": ("diffusion", auraflow, "diffusers"),
    "lumina2": ("diffusion", lumina2, "diffusers"),
    "wan": ("diffusion", wan, "diffusers"),
    "ltx": ("diffusion", ltx, "diffusers"),
}
