"""Sweep 7: new tiny architectures for the memopt robustness sweep (random weights, dropout off).

Each builder: build(size="tiny", batch=None) -> (model, inputs_dict)."""
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
         "hidden_dropout_rate", "attention_dropout_rate")


def _nodrop(*cfgs):
    for c in cfgs:
        for k in _DROP:
            if isinstance(getattr(c, k, None), float):
                setattr(c, k, 0.0)


def _g():
    return torch.Generator().manual_seed(0)


# ----------------------------------------------------------------- decoders
def _dec(cls, cfg_cls, seq=64, **kw):
    def build(size="tiny", batch=None):
        cfg = _config(cfg_cls, vocab_size=128, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _lm_inputs(128, batch or B, seq)

    build.__name__ = cls
    return build


gpt_neox = _dec("GPTNeoXForCausalLM", "GPTNeoXConfig", hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256,
                rotary_pct=0.5, **_IDS)
bloom = _dec("BloomForCausalLM", "BloomConfig", hidden_size=64, n_layer=2, n_head=4, **_IDS)
opt = _dec("OPTForCausalLM", "OPTConfig", hidden_size=64, ffn_dim=128, num_hidden_layers=2,
           num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=64,
           pad_token_id=1, bos_token_id=2, eos_token_id=2)


# ----------------------------------------------------------------- encoders / speech
def deberta_v2(size="tiny", batch=None):
    cfg = _config("DebertaV2Config", vocab_size=128, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128,
                  relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=32,
                  max_relative_positions=64, position_biased_input=False)
    return _training(_tf().DebertaV2ForMaskedLM(cfg)), _lm_inputs(128, batch or B, 64)


def electra_disc(size="tiny", batch=None):
    cfg = _config("ElectraConfig", vocab_size=128, embedding_size=32, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=128)
    g, b = _g(), batch or B
    ids = torch.randint(1, 128, (b, 64), generator=g)
    return _training(_tf().ElectraForPreTraining(cfg)), {
        "input_ids": ids, "labels": torch.randint(0, 2, (b, 64), generator=g)}


def hubert(size="tiny", batch=None):
    cfg = _config("HubertConfig", vocab_size=32, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, conv_dim=(32, 32, 32),
                  conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=4, mask_time_prob=0.0, mask_feature_prob=0.0,
                  layerdrop=0.0, ctc_loss_reduction="mean", pad_token_id=0)
    _nodrop(cfg)
    g, b = _g(), batch or B
    return _training(_tf().HubertForCTC(cfg)), {
        "input_values": torch.randn(b, 4000, generator=g),
        "labels": torch.randint(1, 32, (b, 20), generator=g),
    }


# ----------------------------------------------------------------- vision / video
def beit(size="tiny", batch=None):
    cfg = _config("BeitConfig", image_size=32, patch_size=8, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_labels=10,
                  use_relative_position_bias=True, use_mean_pooling=True, drop_path_rate=0.0)
    g, b = _g(), batch or B
    return _training(_tf().BeitForImageClassification(cfg)), {
        "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "labels": torch.randint(0, 10, (b,), generator=g)}


def videomae(size="tiny", batch=None):
    cfg = _config("VideoMAEConfig", image_size=32, patch_size=8, num_channels=3, num_frames=4,
                  tubelet_size=2, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_labels=5, use_mean_pooling=True)
    g, b = _g(), batch or B
    return _training(_tf().VideoMAEForVideoClassification(cfg)), {
        "pixel_values": torch.randn(b, 4, 3, 32, 32, generator=g),
        "labels": torch.randint(0, 5, (b,), generator=g)}


def detr(size="tiny", batch=None):
    tf = _tf()
    bb = tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                         depths=[1, 1], layer_type="basic", out_features=["stage2"])
    cfg = tf.DetrConfig(use_timm_backbone=False, backbone_config=bb,
                        use_pretrained_backbone=False, d_model=32, encoder_layers=2,
                        decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=8, num_labels=5,
                        auxiliary_loss=False)
    _nodrop(cfg)
    g, b = _g(), batch or B
    # no labels: the Hungarian matcher needs scipy (not installed); step_loss = logits.mean()
    return _training(tf.DetrForObjectDetection(cfg)), {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g)}


# ----------------------------------------------------------------- encoder-decoder / multimodal
def vit_gpt2(size="tiny", batch=None):
    tf = _tf()
    enc = tf.ViTConfig(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4)
    dec = tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                        add_cross_attention=True, is_decoder=True, bos_token_id=0,
                        eos_token_id=0, pad_token_id=0)
    _nodrop(enc, dec)
    cfg = tf.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    cfg.decoder_start_token_id = 0
    cfg.pad_token_id = 0
    g, b = _g(), batch or B
    return _training(tf.VisionEncoderDecoderModel(config=cfg)), {
        "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "labels": torch.randint(1, 128, (b, 16), generator=g)}


def pix2struct(size="tiny", batch=None):
    tf = _tf()
    vis = dict(hidden_size=64, patch_embed_hidden_size=48, d_ff=128, d_kv=16,
               num_hidden_layers=2, num_attention_heads=4, patch_size=4, num_channels=3,
               dropout_rate=0.0, attention_dropout=0.0)
    txt = dict(vocab_size=128, hidden_size=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
               dropout_rate=0.0, pad_token_id=0, decoder_start_token_id=0)
    cfg = tf.Pix2StructConfig(vision_config=vis, text_config=txt)
    _nodrop(cfg.vision_config, cfg.text_config)
    g, b = _g(), batch or B
    patches = torch.randn(b, 16, 2 + 3 * 4 * 4, generator=g)
    patches[:, :, 0] = (torch.arange(16) // 4 + 1).float()  # row ids (1-based)
    patches[:, :, 1] = (torch.arange(16) % 4 + 1).float()  # column ids
    return _training(tf.Pix2StructForConditionalGeneration(cfg)), {
        "flattened_patches": patches, "attention_mask": torch.ones(b, 16),
        "labels": torch.randint(1, 128, (b, 12), generator=g)}


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


def paligemma(size="tiny", batch=None):
    tf = _tf()
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8,
                  projection_dim=64)
    text = dict(model_type="gemma", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=160,
                max_position_embeddings=128, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    cfg = tf.PaliGemmaConfig(vision_config=vision, text_config=text, image_token_index=150,
                             projection_dim=64)
    _nodrop(cfg.vision_config, cfg.text_config)
    g, b = _g(), batch or B
    ids = torch.randint(3, 128, (b, 24), generator=g)
    ids[:, :16] = 150  # 16 image tokens (32/8)^2
    labels = ids.clone()
    labels[:, :16] = -100
    return _training(tf.PaliGemmaForConditionalGeneration(cfg)), {
        "input_ids": ids, "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "labels": labels, "token_type_ids": (ids != 150).long()}


def mllama(size="tiny", batch=None):
    tf = _tf()
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_global_layers=1, attention_heads=2, image_size=16, patch_size=8,
                  max_num_tiles=1, intermediate_layers_indices=[0], vision_output_dim=64,
                  supported_aspect_ratios=[[1, 1]])
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
                cross_attention_layers=[1], max_position_embeddings=128, pad_token_id=0,
                bos_token_id=1, eos_token_id=2)
    cfg = tf.MllamaConfig(vision_config=vision, text_config=text, image_token_index=150)
    g, b = _g(), batch or B
    ids = torch.randint(3, 128, (b, 24), generator=g)
    ids[:, 0] = 150
    return _training(tf.MllamaForConditionalGeneration(cfg)), {
        "input_ids": ids, "labels": ids.clone(),
        "pixel_values": torch.randn(b, 1, 1, 3, 16, 16, generator=g),
        "aspect_ratio_ids": torch.ones(b, 1, dtype=torch.long),
        "aspect_ratio_mask": torch.ones(b, 1, 1, dtype=torch.long),
        "cross_attention_mask": torch.ones(b, 24, 1, 1, dtype=torch.long)}


# ----------------------------------------------------------------- diffusers
def mochi(size="tiny", batch=None):
    import diffusers

    model = diffusers.MochiTransformer3DModel(
        patch_size=2, num_attention_heads=2, attention_head_dim=16, num_layers=2,
        pooled_projection_dim=32, in_channels=4, text_embed_dim=32, time_embed_dim=32,
        activation_fn="swiglu", max_sequence_length=8)
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 2, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
        "encoder_attention_mask": torch.ones(b, 8, dtype=torch.bool)}


def hunyuan_video(size="tiny", batch=None):
    import diffusers

    model = diffusers.HunyuanVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, mlp_ratio=2.0, patch_size=2,
        patch_size_t=1, text_embed_dim=32, pooled_projection_dim=16, rope_axes_dim=(4, 6, 6),
        guidance_embeds=False)
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 2, 8, 8, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "encoder_attention_mask": torch.ones(b, 8, dtype=torch.long),
        "pooled_projections": torch.randn(b, 16, generator=g)}


def stable_audio(size="tiny", batch=None):
    import diffusers

    model = diffusers.StableAudioDiTModel(
        sample_size=16, in_channels=8, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, num_key_value_attention_heads=1, out_channels=8,
        cross_attention_dim=32, time_proj_dim=32, global_states_input_dim=32,
        cross_attention_input_dim=24)
    g, b = _g(), batch or B
    return model.train(), {
        "hidden_states": torch.randn(b, 8, 16, generator=g),
        "timestep": torch.randint(0, 1000, (b,), generator=g),
        "encoder_hidden_states": torch.randn(b, 6, 24, generator=g),
        "global_hidden_states": torch.randn(b, 1, 32, generator=g)}


NEW = {
    e.name: e
    for e in (
        ZooModel("gpt_neox", "decoder", gpt_neox),
        ZooModel("bloom", "decoder", bloom),
        ZooModel("opt", "decoder", opt),
        ZooModel("deberta_v2", "encoder", deberta_v2),
        ZooModel("electra_disc", "encoder", electra_disc),
        ZooModel("hubert", "speech", hubert),
        ZooModel("beit", "vision", beit),
        ZooModel("videomae", "video", videomae),
        ZooModel("detr", "detection", detr),
        ZooModel("vit_gpt2", "multimodal", vit_gpt2),
        ZooModel("pix2struct", "multimodal", pix2struct),
        ZooModel("musicgen", "audio", musicgen),
        ZooModel("paligemma", "multimodal", paligemma),
        ZooModel("mllama", "multimodal", mllama),
        ZooModel("mochi", "diffusion", mochi, needs="diffusers"),
        ZooModel("hunyuan_video", "diffusion", hunyuan_video, needs="diffusers"),
        ZooModel("stable_audio", "diffusion", stable_audio, needs="diffusers"),
    )
}
