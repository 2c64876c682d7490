"""Sweep 9: tiny architectures new to memopt (random weights, dropout off, no downloads).

Each builder: build(size="tiny", batch=None) -> (model, inputs_dict). Scripts adapted from sweep 8."""
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
         "hidden_dropout_rate", "attention_dropout_rate", "projection_dropout", "dropout_p")


def _nodrop(*cfgs):
    for c in cfgs:
        if c is None:
            continue
        for k in _DROP:
            if isinstance(getattr(c, k, None), float):
                setattr(c, k, 0.0)


def _g():
    return torch.Generator().manual_seed(0)


# ----------------------------------------------------------------- diffusers: Qwen-Image DiT
def qwen_image(size="tiny", batch=None):
    import diffusers

    model = diffusers.QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6))
    g, b = _g(), batch or B
    h = w = 4  # latent patches
    return model.train(), {
        "hidden_states": torch.randn(b, h * w, 16, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "encoder_hidden_states_mask": torch.ones(b, 8, dtype=torch.long),
        "timestep": torch.full((b,), 0.5),
        "img_shapes": [(1, h, w)] * b,
        "return_dict": False}


# ----------------------------------------------------------------- decoder: Cohere2 (sliding/full)
def cohere2(size="tiny", batch=None):
    cfg = _config("Cohere2Config", vocab_size=128, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, sliding_window=16,
                  layer_types=["sliding_attention", "full_attention"], **_IDS)
    return _training(_tf().Cohere2ForCausalLM(cfg)), _lm_inputs(128, batch or B, 32)


# ----------------------------------------------------------------- Mask2Former (tiny Swin)
def mask2former(size="tiny", batch=None):
    tf = _tf()
    swin = tf.SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1],
                         num_heads=[1, 1, 2, 2], window_size=4,
                         out_features=["stage1", "stage2", "stage3", "stage4"])
    cfg = tf.Mask2FormerConfig(backbone_config=swin, use_pretrained_backbone=False,
                               num_labels=3, hidden_dim=32, feature_size=32, mask_feature_size=32,
                               encoder_feedforward_dim=64, dim_feedforward=64,
                               encoder_layers=1, decoder_layers=2, num_attention_heads=2,
                               num_queries=8, train_num_points=64, common_stride=4)
    _nodrop(cfg, swin)
    g, b = _g(), batch or B
    # its loss (Hungarian matching) needs scipy, which is not installed and cannot be: no
    # labels, so the loss is the mean of the first output (class_queries_logits)
    return _training(tf.Mask2FormerForUniversalSegmentation(cfg)), {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g)}


# ----------------------------------------------------------------- xLSTM
def xlstm(size="tiny", batch=None):
    cfg = _config("xLSTMConfig", vocab_size=128, hidden_size=64, embedding_dim=64,
                  num_hidden_layers=2, num_heads=4, chunk_size=16, mode="train",
                  autocast_kernel_dtype="float32", ffn_round_up_to_multiple_of=16, **_IDS)
    return _training(_tf().xLSTMForCausalLM(cfg)), _lm_inputs(128, batch or B, 32)


# ----------------------------------------------------------------- RT-DETR (tiny ResNet)
def rtdetr(size="tiny", batch=None):
    tf = _tf()
    bb = tf.RTDetrResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 64], depths=[1, 1, 1, 1],
                               layer_type="basic", out_features=["stage2", "stage3", "stage4"])
    cfg = tf.RTDetrConfig(backbone_config=bb, use_pretrained_backbone=False, num_labels=3,
                          encoder_in_channels=[32, 64, 64], feat_strides=[8, 16, 32],
                          encoder_hidden_dim=32, encoder_ffn_dim=64, encoder_attention_heads=2,
                          d_model=32, decoder_ffn_dim=64, decoder_attention_heads=2,
                          decoder_layers=2, num_queries=8, decoder_in_channels=[32, 32, 32], num_denoising=0, decoder_n_points=2,
                          anchor_image_size=None)
    _nodrop(cfg, bb)
    g, b = _g(), batch or B
    # its loss (Hungarian matcher) needs scipy, not installed: no labels, the loss is the
    # mean of the first output (logits)
    return _training(tf.RTDetrForObjectDetection(cfg)), {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g)}


# ----------------------------------------------------------------- diffusers: CogView4 DiT (extra)
def cogview4(size="tiny", batch=None):
    import diffusers

    model = diffusers.CogView4Transformer2DModel(
        patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, text_embed_dim=32, time_embed_dim=32, condition_dim=16,
        pos_embed_max_size=16, sample_size=8, rope_axes_dim=(16, 16))
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.full((b,), 500.0),
        "original_size": torch.full((b, 2), 64.0),
        "target_size": torch.full((b, 2), 64.0),
        "crop_coords": torch.zeros(b, 2),
        "return_dict": False}


def cogview4_h4(size="tiny", batch=None):
    """cogview4 with 4 heads (no model dimension equal to batch 2 but the (b, 2) conditions):
    a diagnostic for REPORT item 4."""
    import diffusers

    model, inputs = cogview4(size, batch)
    torch.manual_seed(0)
    model = diffusers.CogView4Transformer2DModel(
        patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=4, text_embed_dim=32, time_embed_dim=32, condition_dim=16,
        pos_embed_max_size=16, sample_size=8, rope_axes_dim=(16, 16))
    return model.train(), inputs


NEW = {
    e.name: e
    for e in (
        ZooModel("qwen_image", "diffusion", qwen_image, needs="diffusers"),
        ZooModel("cohere2", "decoder", cohere2),
        ZooModel("mask2former", "vision", mask2former),
        ZooModel("xlstm", "recurrent", xlstm),
        ZooModel("rtdetr", "vision", rtdetr),
        ZooModel("cogview4", "diffusion", cogview4, needs="diffusers"),
        ZooModel("cogview4_h4", "diffusion", cogview4_h4, needs="diffusers"),
    )
}
