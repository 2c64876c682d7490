"""Sweep 4 builders: build(size="tiny", batch=None) -> (model, inputs). Random weights, tiny,
dropout off, inputs with labels (or a model-computed loss)."""

from __future__ import annotations

import torch

from benchmarks.zoo_models import _IDS, _images, _lm_inputs, _tf, _training

_DROPOUTS = (
    "attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "classifier_dropout",
    "activation_dropout", "drop_path_rate", "residual_dropout", "ffn_dropout",
    "positional_dropout", "path_dropout", "head_dropout", "attn_dropout", "final_dropout",
    "layerdrop", "classifier_dropout_prob", "embedding_dropout", "mlp_dropout",
    "aspp_dropout_prob",
)
_SINGLE = "single_label_classification"


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _nodrop(cfg):
    for k in _DROPOUTS:
        if isinstance(getattr(cfg, k, None), float):
            setattr(cfg, k, 0.0)
    for sub in ("text_config", "vision_config"):
        if getattr(cfg, sub, None) is not None:
            _nodrop(getattr(cfg, sub))
    return cfg


def _config(cfg_cls: str, **kw):
    return _nodrop(getattr(_tf(), cfg_cls)(**kw))


def _lm(cls: str, cfg_cls: str, batch: int = 4, seq: int = 64, **kw):
    def build(size: str = "tiny", b: int | None = None):
        cfg = _config(cfg_cls, vocab_size=128, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _lm_inputs(128, b or batch, seq)

    return build


_DEC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=256, **_IDS)
_GQA = dict(_DEC, num_key_value_heads=2, head_dim=16)

# MoE with attention sinks, alternating sliding/full attention
gpt_oss = _lm("GptOssForCausalLM", "GptOssConfig", num_local_experts=4, num_experts_per_tok=2,
              sliding_window=16, layer_types=["sliding_attention", "full_attention"], **_GQA)
# sliding window + global, qk norm, query_pre_attn_scalar
gemma3 = _lm("Gemma3ForCausalLM", "Gemma3TextConfig", sliding_window=16, query_pre_attn_scalar=16,
             layer_types=["sliding_attention", "full_attention"], **_GQA)
modernbert = _lm("ModernBertForMaskedLM", "ModernBertConfig", hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=128, max_position_embeddings=256,
                 local_attention=16, layer_types=["sliding_attention", "full_attention"],
                 cls_token_id=1, sep_token_id=2, **_IDS)
falcon_mamba = _lm("FalconMambaForCausalLM", "FalconMambaConfig", batch=2, seq=32, hidden_size=64,
                   state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=8,
                   **_IDS)
_longformer = _lm("LongformerForMaskedLM", "LongformerConfig", attention_window=16,
                 hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=256, type_vocab_size=1, bos_token_id=0, eos_token_id=2,
                 pad_token_id=1, sep_token_id=2)



def longformer(size="tiny", batch=None):
    # sliding-window attention (window 16) plus global attention on the first token
    m, inp = _longformer(size, batch)
    inp["input_ids"] = inp["input_ids"].clamp_min(3)
    inp["labels"] = inp["input_ids"]
    gm = torch.zeros_like(inp["input_ids"])
    gm[:, 0] = 1
    inp["global_attention_mask"] = gm
    return m, inp


def siglip(size="tiny", batch=None):
    # two towers, sigmoid contrastive loss (return_loss=True)
    cfg = _config("SiglipConfig",
                  text_config=dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   max_position_embeddings=32, projection_size=64),
                  vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, image_size=32, patch_size=8))
    b, g = batch or 4, _g()
    return _training(_tf().SiglipModel(cfg)), {
        "input_ids": torch.randint(1, 128, (b, 16), generator=g),
        "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "return_loss": True,
    }


def clip(size="tiny", batch=None):
    cfg = _config("CLIPConfig", projection_dim=32,
                  text_config=dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   max_position_embeddings=32, eos_token_id=2, bos_token_id=0,
                                   pad_token_id=1),
                  vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, image_size=32, patch_size=8))
    b, g = batch or 4, _g()
    ids = torch.randint(3, 128, (b, 16), generator=g)
    ids[:, -1] = 2
    return _training(_tf().CLIPModel(cfg)), {
        "input_ids": ids, "pixel_values": torch.randn(b, 3, 32, 32, generator=g),
        "return_loss": True,
    }


def _img(cls, cfg_cls, side=32, batch=8, **kw):
    def build(size="tiny", b=None):
        cfg = _config(cfg_cls, num_labels=10, problem_type=_SINGLE, **kw)
        return _training(getattr(_tf(), cls)(cfg)), _images(b or batch, 3, side)

    return build


dinov2 = _img("Dinov2ForImageClassification", "Dinov2Config", hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8)
mobilevit = _img("MobileViTForImageClassification", "MobileViTConfig", side=64, image_size=64,
                 patch_size=2, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 128],
                 num_attention_heads=4, expand_ratio=2.0)


def segformer(size="tiny", batch=None):
    cfg = _config("SegformerConfig", num_labels=5, num_encoder_blocks=2, depths=[1, 1],
                  sr_ratios=[4, 2], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                  num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32)
    b, g = batch or 4, _g()
    return _training(_tf().SegformerForSemanticSegmentation(cfg)), {
        "pixel_values": torch.randn(b, 3, 64, 64, generator=g),
        "labels": torch.randint(0, 5, (b, 64, 64), generator=g),
    }


def qwen2vl(size="tiny", batch=None):
    # text + one image per sample; tiny vision tower (patch 4, 2x2 merge, temporal patch 2)
    tf = _tf()
    text = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": [2, 3, 3]}, **_IDS)
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, in_channels=3,
                  patch_size=4, spatial_merge_size=2, temporal_patch_size=2)
    cfg = _config("Qwen2VLConfig", text_config=text, vision_config=vision, image_token_id=150,
                  video_token_id=151, vision_start_token_id=152, vision_end_token_id=153)
    b, g = batch or 2, _g()
    gh = gw = 4  # 16x16 image -> 4x4 patches -> 2x2 = 4 merged tokens
    n_img = gh * gw // 4
    ids = torch.randint(3, 140, (b, 32), generator=g)
    ids[:, 2] = 152
    ids[:, 3:3 + n_img] = 150
    ids[:, 3 + n_img] = 153
    labels = ids.clone()
    labels[:, 2:4 + n_img] = -100
    pix = torch.randn(b * gh * gw, 3 * 2 * 4 * 4, generator=g)
    thw = torch.tensor([[1, gh, gw]] * b)
    mm = (ids == 150).int()  # token types: text 0, image 1 (the processor's output)
    return _training(tf.Qwen2VLForConditionalGeneration(cfg)), {
        "input_ids": ids, "labels": labels, "pixel_values": pix, "image_grid_thw": thw,
        "mm_token_type_ids": mm,
    }


# ---- diffusers ----

def pixart(size="tiny", batch=None):
    import diffusers

    model = diffusers.PixArtTransformer2DModel(
        num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
        cross_attention_dim=64, sample_size=16, patch_size=2, caption_channels=32,
        use_additional_conditions=False, norm_type="ada_norm_single", num_embeds_ada_norm=1000,
        norm_num_groups=32,
    )
    b, g = batch or 2, _g()
    return model.train(), {
        "hidden_states": torch.randn(b, 4, 16, 16, generator=g),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "timestep": torch.tensor([10] * b),
        "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
    }


class _ControlNetLoss(torch.nn.Module):
    """ControlNet's residuals (a tuple and a tensor) -> one scalar, so that every zero conv
    gets a gradient (step_loss would take the mid-block residual only)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, **kw):
        down, mid = self.net(**kw, return_dict=False)
        return sum(r.float().pow(2).mean() for r in down) + mid.float().pow(2).mean()


def controlnet(size="tiny", batch=None):
    import diffusers

    torch.manual_seed(0)
    model = diffusers.ControlNetModel(
        in_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        block_out_channels=(32, 64), layers_per_block=1, cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8, conditioning_embedding_out_channels=(16, 32),
    )
    # the zero-initialized convs random, else every output and most gradients are 0
    g = _g(1)
    for m in [*model.controlnet_down_blocks, model.controlnet_mid_block,
              model.controlnet_cond_embedding.conv_out]:
        m.weight.data = torch.randn(m.weight.shape, generator=g) * 0.05
    b, g = batch or 2, _g()
    return _ControlNetLoss(model).train(), {
        "sample": torch.randn(b, 4, 16, 16, generator=g),
        "timestep": torch.tensor([10] * b),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
        "controlnet_cond": torch.randn(b, 3, 32, 32, generator=g),
    }


# ---- added after the first ten (time left) ----

bigbird = _lm("BigBirdForMaskedLM", "BigBirdConfig", seq=128, attention_type="block_sparse",
              block_size=8, num_random_blocks=2, hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=128, max_position_embeddings=256,
              type_vocab_size=1, bos_token_id=0, eos_token_id=2, pad_token_id=1, sep_token_id=2)
# mamba + attention + MoE: layer 0 mamba with a dense MLP, layer 1 attention with 4 experts
jamba = _lm("JambaForCausalLM", "JambaConfig", batch=2, seq=32, hidden_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
            expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1,
            use_mamba_kernels=False, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
            mamba_dt_rank=8, max_position_embeddings=256, **_IDS)


def unet3d(size="tiny", batch=None):
    import diffusers

    model = diffusers.UNet3DConditionModel(
        sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
        up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"), block_out_channels=(32, 64),
        layers_per_block=1, norm_num_groups=8, cross_attention_dim=32, attention_head_dim=8,
    )
    b, g = batch or 1, _g()
    return model.train(), {
        "sample": torch.randn(b, 4, 3, 16, 16, generator=g),
        "timestep": torch.tensor([10] * b),
        "encoder_hidden_states": torch.randn(b, 8, 32, generator=g),
    }


MODELS = {
    "gpt_oss": ("moe", gpt_oss, "transformers"),
    "gemma3": ("decoder", gemma3, "transformers"),
    "modernbert": ("encoder", modernbert, "transformers"),
    "siglip": ("two-tower", siglip, "transformers"),
    "clip": ("two-tower", clip, "transformers"),
    "bigbird": ("encoder", bigbird, "transformers"),
    "jamba": ("hybrid", jamba, "transformers"),
    "unet3d": ("diffusion", unet3d, "diffusers"),
    "dinov2": ("vision", dinov2, "transformers"),
    "segformer": ("vision", segformer, "transformers"),
    "mobilevit": ("vision", mobilevit, "transformers"),
    "falcon_mamba": ("ssm", falcon_mamba, "transformers"),
    "longformer": ("encoder", longformer, "transformers"),
    "qwen2vl": ("multimodal", qwen2vl, "transformers"),
    "pixart": ("diffusion", pixart, "diffusers"),
    "controlnet": ("diffusion", controlnet, "diffusers"),
}
