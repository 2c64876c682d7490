"""Sweep 8: tiny architectures new to memopt (random weights, dropout off, no downloads).

Each builder: build(size="tiny", batch=None) -> (model, inputs_dict). musicgen and electra_disc
are sweep 7's builders (docs/data/sweep7/sweep7_models.py), copied: sweep 7 built them but never
ran them."""
from __future__ import annotations

import sys

sys.path.insert(0, __import__("os").path.abspath(__import__("os").path.join(__import__("os").path.dirname(__file__), "../../..")))

import torch

from benchmarks.zoo_models import _IDS, ZooModel, _lm_inputs, _tf, _training  # noqa: E402
from benchmarks.zoo_wide import _config  # noqa: E402  (dropouts off)

B = 2
_DROP = ("dropout", "attention_dropout", "activation_dropout", "hidden_dropout",
         "hidden_dropout_prob", "attention_probs_dropout_prob", "attn_pdrop", "resid_pdrop",
         "embd_pdrop", "layerdrop", "feat_proj_dropout", "final_dropout", "dropout_rate",
         "drop_path_rate", "encoder_layerdrop", "decoder_layerdrop", "classifier_dropout",
         "hidden_dropout_rate", "attention_dropout_rate", "projection_dropout")


def _nodrop(*cfgs):
    for c in cfgs:
        for k in _DROP:
            if isinstance(getattr(c, k, None), float):
                setattr(c, k, 0.0)


def _g():
    return torch.Generator().manual_seed(0)


# ----------------------------------------------------------------- sweep 7's two, never run
def musicgen(size="tiny", batch=None):
    tf = _tf()
    cfg = tf.MusicgenDecoderConfig(vocab_size=64, hidden_size=64, ffn_dim=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   max_position_embeddings=128, num_codebooks=2,
                                   pad_token_id=63, bos_token_id=63)
    _nodrop(cfg)
    g, b = _g(), batch or B
    ids = torch.randint(0, 60, (b * 2, 32), generator=g)
    return _training(tf.MusicgenForCausalLM(cfg)), {
        "input_ids": ids, "labels": torch.randint(0, 60, (b, 32, 2), generator=g)}


def electra_disc(size="tiny", batch=None):
    cfg = _config("ElectraConfig", vocab_size=128, embedding_size=32, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=128)
    g, b = _g(), batch or B
    ids = torch.randint(1, 128, (b, 64), generator=g)
    return _training(_tf().ElectraForPreTraining(cfg)), {
        "input_ids": ids, "labels": torch.randint(0, 2, (b, 64), generator=g)}


# ----------------------------------------------------------------- MoE (MLA attention) / hybrid SSM
def deepseek_v2(size="tiny", batch=None):
    cfg = _config("DeepseekV2Config", vocab_size=128, hidden_size=64, intermediate_size=128,
                  moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
                  num_experts_per_tok=2, first_k_dense_replace=0, kv_lora_rank=16,
                  q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=8,
                  n_group=1, topk_group=1, max_position_embeddings=128, **_IDS)
    return _training(_tf().DeepseekV2ForCausalLM(cfg)), _lm_inputs(128, batch or B, 32)


def falcon_h1(size="tiny", batch=None):
    cfg = _config("FalconH1Config", vocab_size=128, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1,
                  mamba_d_state=16, mamba_d_conv=4, mamba_expand=1, mamba_chunk_size=16,
                  max_position_embeddings=128, **_IDS)
    return _training(_tf().FalconH1ForCausalLM(cfg)), _lm_inputs(128, batch or B, 32)


# ----------------------------------------------------------------- dense prediction / SAM
def dpt(size="tiny", batch=None):
    cfg = _config("DPTConfig", image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=4, num_attention_heads=2, backbone_out_indices=[0, 1, 2, 3],
                  neck_hidden_sizes=[16, 16, 32, 32], fusion_hidden_size=16,
                  reassemble_factors=[4, 2, 1, 0.5], head_in_index=-1, is_hybrid=False,
                  num_labels=4, use_auxiliary_head=True, semantic_loss_ignore_index=255)
    g, b = _g(), batch or B
    # DPTForDepthEstimation has no training loss and its ReLU head gives zero gradients at
    # random init: the segmentation head (with its auxiliary head) instead
    return _training(_tf().DPTForSemanticSegmentation(cfg)), {
        "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "labels": torch.randint(0, 4, (b, 32, 32), generator=g)}


def sam(size="tiny", batch=None):
    tf = _tf()
    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                  patch_size=8, output_channels=32, window_size=4, global_attn_indexes=[1],
                  mlp_dim=64, num_pos_feats=16)
    prompt = dict(hidden_size=32, image_size=64, patch_size=8, mask_input_channels=4)
    dec = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_dim=64,
               iou_head_hidden_dim=32)
    cfg = tf.SamConfig(vision_config=vision, prompt_encoder_config=prompt,
                       mask_decoder_config=dec)
    g, b = _g(), batch or B
    return _training(tf.SamModel(cfg)), {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g),
        "input_points": torch.rand(b, 1, 1, 2, generator=g) * 64}


# ----------------------------------------------------------------- contrastive audio-text
def clap(size="tiny", batch=None):
    tf = _tf()
    text = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=64, projection_dim=32)
    audio = dict(spec_size=32, patch_size=4, num_mel_bins=32, patch_embeds_hidden_size=16,
                 depths=[1, 1], num_attention_heads=[2, 2], window_size=4, hidden_size=32,
                 projection_dim=32, enable_fusion=False, patch_stride=(4, 4), mlp_ratio=2.0,
                 flatten_patch_embeds=True)
    cfg = tf.ClapConfig(text_config=text, audio_config=audio, projection_dim=32)
    _nodrop(cfg.text_config, cfg.audio_config)
    g, b = _g(), batch or B
    return _training(tf.ClapModel(cfg)), {
        "input_ids": torch.randint(3, 128, (b, 16), generator=g),
        "input_features": torch.randn(b, 1, 32, 32, generator=g),
        "return_loss": True}


# ----------------------------------------------------------------- diffusers: SVD UNet
def svd_unet(size="tiny", batch=None):
    import diffusers

    model = diffusers.UNetSpatioTemporalConditionModel(
        sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        block_out_channels=(32, 64), addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=24, layers_per_block=1, cross_attention_dim=32,
        transformer_layers_per_block=1, num_attention_heads=(2, 4), num_frames=2)
    g, b = _g(), batch or B
    return model.train(), {
        "sample": torch.randn(b, 2, 4, 8, 8, generator=g),
        "timestep": torch.tensor(500.0),
        "encoder_hidden_states": torch.randn(b, 1, 32, generator=g),
        "added_time_ids": torch.randn(b, 3, generator=g)}


NEW = {
    e.name: e
    for e in (
        ZooModel("musicgen", "audio", musicgen),
        ZooModel("electra_disc", "encoder", electra_disc),
        ZooModel("deepseek_v2", "moe", deepseek_v2),
        ZooModel("falcon_h1", "ssm", falcon_h1),
        ZooModel("dpt", "vision", dpt),
        ZooModel("sam", "vision", sam),
        ZooModel("clap", "multimodal", clap),
        ZooModel("svd_unet", "diffusion", svd_unet, needs="diffusers"),
    )
}
