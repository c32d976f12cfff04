#!/usr/bin/env python3
"""Build the fusion fixture matrix: tiny random-weight decoders, exported to ONNX in many forms.

Every family is exported in its default form (torch dynamo, dynamic shapes, float32, opset 18)
and a spread of the other axes is added so each axis value appears several times:
fixed shapes, opset 23, float16, past key/values (decode graphs), TorchScript (transformers 4.x),
two torch versions, and external data (torch writes `<name>.onnx.data` beside the model).

Run once per venv; each venv exports only the variants that name its torch line:
    /opt/venv-torch/bin/python  scripts/make_fusion_matrix.py           # torch 2.11, transformers 5.x
    /opt/venv-torch2/bin/python scripts/make_fusion_matrix.py           # torch 2.9, transformers 4.57
    ... [--only NAME ...] [--list]

Output: tests/fixtures/matrix/<name>.onnx (+ <name>.onnx.data when external),
<name>.config.json (the model's HF config.json) and one entry per model in expect.json:
family, settings, rope_sites (derived from the config: q and k per layer that has RoPE, plus the
families' extra sites, never from ropekit), expect_fused (the TARGET for a correct tool) and
expect_unfused_reasons. A model whose export fails is recorded in export_log.json, not in
expect.json.
"""

import argparse
import json
import os
import sys
import tempfile
import traceback

import numpy as np
import torch
import transformers
from torch import nn

from tiny_hf_models import (HEAD_DIM, HEADS, HIDDEN, KV_HEADS, LAYERS, SEED, TF_MAJOR,
                            longrope_factors, register_ts_attention, rope_kw)
from tiny_hf_models import common as _common

TORCH_LINE = "t" + "".join(torch.__version__.split("+")[0].split(".")[:2])  # "t211", "t29"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "matrix")

VOCAB, INTER = 32, 32
EXPORT_B, EXPORT_S = 2, 7          # example input of the no-cache exports
PAST_B, PAST_S, PAST_P = 2, 3, 5   # example input of the decode exports (S new tokens, P cached)


def common(**over):
    return _common(VOCAB, INTER, **over)


class DenseMLP(nn.Module):
    """Stands in for a MoE block (export of tiny MoE routing is not what this matrix tests)."""

    def __init__(self, hidden, inter, pair=False):
        super().__init__()
        self.pair = pair
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)

    def forward(self, x, *a, **k):
        y = self.down(torch.nn.functional.silu(self.up(x)))
        return (y, None) if self.pair else y  # GPT-OSS's layer unpacks (out, router scores)


def family(name):
    """(model class name, config, rope sites, extra) for one family, from the config only.

    extra: mrope (position_ids (3,B,S)), dense_mlp (replace every layer's mlp), fused (target
    number fused if not all), reasons (expected reason words for unfused sites)."""
    T = transformers
    L = LAYERS
    x = {}
    if name == "llama":
        cfg = T.LlamaConfig(head_dim=HEAD_DIM, **common(), **rope_kw())
        return "LlamaForCausalLM", cfg, 2 * L, x
    if name == "llama3_scaling":
        cfg = T.LlamaConfig(head_dim=HEAD_DIM, **common(max_position_embeddings=131072),
                            **rope_kw("llama3", 500000.0, factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=8192))
        return "LlamaForCausalLM", cfg, 2 * L, x
    if name == "llama_dynamic_ntk":
        # inv_freq depends on the largest position at run time: the default per-call rows keep
        # that in the graph, so a correct tool fuses every site (as phi3_longrope's switch); a
        # fixed table must refuse it (tests/python/test_fuse_cases.py). No torch here exports it
        # (2.11 and 2.9 dynamo: data-dependent guard; 2.9 TorchScript freezes the branch)
        cfg = T.LlamaConfig(head_dim=HEAD_DIM, **common(), **rope_kw("dynamic", factor=2.0))
        return "LlamaForCausalLM", cfg, 2 * L, x
    if name == "mistral":
        cfg = T.MistralConfig(head_dim=HEAD_DIM, sliding_window=None, **common(), **rope_kw())
        return "MistralForCausalLM", cfg, 2 * L, x
    if name == "mistral_yarn":
        cfg = T.MistralConfig(head_dim=HEAD_DIM, sliding_window=None,
                              **common(max_position_embeddings=131072),
                              **rope_kw("yarn", 1000000.0, factor=4.0,
                                        original_max_position_embeddings=32768))
        return "MistralForCausalLM", cfg, 2 * L, x
    if name == "qwen2":
        cfg = T.Qwen2Config(**common(), **rope_kw(theta=1000000.0))
        return "Qwen2ForCausalLM", cfg, 2 * L, x
    if name == "qwen3":
        cfg = T.Qwen3Config(head_dim=HEAD_DIM, **common(), **rope_kw(theta=1000000.0))
        return "Qwen3ForCausalLM", cfg, 2 * L, x
    if name == "qwen3_yarn":
        cfg = T.Qwen3Config(head_dim=HEAD_DIM, **common(max_position_embeddings=131072),
                            **rope_kw("yarn", 1000000.0, factor=4.0,
                                      original_max_position_embeddings=32768))
        return "Qwen3ForCausalLM", cfg, 2 * L, x
    if name == "qwen3_moe":
        cfg = T.Qwen3MoeConfig(head_dim=HEAD_DIM, **common(), num_experts=4, num_experts_per_tok=2,
                               moe_intermediate_size=32, decoder_sparse_step=1,
                               **rope_kw(theta=1000000.0))
        return "Qwen3MoeForCausalLM", cfg, 2 * L, {"dense_mlp": True}
    if name == "mixtral":
        cfg = T.MixtralConfig(head_dim=HEAD_DIM, sliding_window=None, **common(), num_local_experts=4,
                              num_experts_per_tok=2, **rope_kw(theta=1000000.0))
        return "MixtralForCausalLM", cfg, 2 * L, {"dense_mlp": True}
    if name == "gemma":
        cfg = T.GemmaConfig(head_dim=HEAD_DIM, **common(), **rope_kw())
        return "GemmaForCausalLM", cfg, 2 * L, x
    if name == "gemma2":
        cfg = T.Gemma2Config(head_dim=HEAD_DIM, **common(), sliding_window=4096, **rope_kw())
        return "Gemma2ForCausalLM", cfg, 2 * L, x
    if name == "gemma3_text":
        # two angle sources: sliding layers theta 1e4, full layers theta 1e6 (+ linear scaling 8)
        kw = common()
        kw["layer_types"] = ["sliding_attention", "full_attention"]
        if TF_MAJOR >= 5:
            rp = {"rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}}}
        else:
            rp = {"rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                  "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
        cfg = T.Gemma3TextConfig(head_dim=HEAD_DIM, sliding_window=4096, **kw, **rp)
        return "Gemma3ForCausalLM", cfg, 2 * L, x
    if name == "phi3":
        cfg = T.Phi3Config(**common(), **rope_kw())
        return "Phi3ForCausalLM", cfg, 2 * L, x
    if name == "phi3_longrope":
        # Phi-3.5 style longrope: the graph switches short/long factors on max(position)+1 > 4096
        short, long_ = longrope_factors(HEAD_DIM // 2)
        kw = common(max_position_embeddings=131072)
        kw["original_max_position_embeddings"] = 4096
        cfg = T.Phi3Config(**kw, **rope_kw("longrope", short_factor=short, long_factor=long_))
        return "Phi3ForCausalLM", cfg, 2 * L, x
    if name == "phi4_mini":
        # Phi-4-mini: partial rotary 0.75 (12 of 16 channels) with longrope
        short, long_ = longrope_factors(int(HEAD_DIM * 0.75) // 2)
        kw = common(max_position_embeddings=131072)
        kw["original_max_position_embeddings"] = 4096
        if TF_MAJOR >= 5:
            cfg = T.Phi3Config(**kw, **rope_kw("longrope", short_factor=short, long_factor=long_,
                                                 partial_rotary_factor=0.75))
        else:
            cfg = T.Phi3Config(**kw, partial_rotary_factor=0.75,
                               **rope_kw("longrope", short_factor=short, long_factor=long_))
        return "Phi3ForCausalLM", cfg, 2 * L, x
    if name == "phi_partial":
        kw = common()
        if TF_MAJOR >= 5:
            cfg = T.PhiConfig(**kw, **rope_kw(partial_rotary_factor=0.5))
        else:
            cfg = T.PhiConfig(**kw, partial_rotary_factor=0.5, **rope_kw())
        return "PhiForCausalLM", cfg, 2 * L, x
    if name == "gptj":
        cfg = T.GPTJConfig(vocab_size=VOCAB, n_positions=2048, n_embd=HIDDEN, n_layer=L,
                           n_head=HEADS, rotary_dim=8, n_inner=INTER, use_cache=False,
                           tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
        return "GPTJForCausalLM", cfg, 2 * L, x
    if name == "gpt_neox":
        kw = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=L,
                  num_attention_heads=HEADS, intermediate_size=INTER, max_position_embeddings=2048,
                  use_cache=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
        if TF_MAJOR >= 5:
            kw.update(rope_kw(partial_rotary_factor=0.25))
        else:
            kw.update(rotary_pct=0.25, rotary_emb_base=10000)
        return "GPTNeoXForCausalLM", T.GPTNeoXConfig(**kw), 2 * L, x
    if name == "cohere":
        # interleaved pairs, cos/sin widened with repeat_interleave(2)
        cfg = T.CohereConfig(**common(), **rope_kw())
        return "CohereForCausalLM", cfg, 2 * L, x
    if name == "olmo2":
        cfg = T.Olmo2Config(**common(), **rope_kw(theta=500000.0))
        return "Olmo2ForCausalLM", cfg, 2 * L, x
    if name == "smollm3":
        # layer 1 has no RoPE (NoPE): 2 sites, not 4
        cfg = T.SmolLM3Config(**common(), no_rope_layers=[1, 0], **rope_kw(theta=2000000.0))
        nope = sum(1 for v in cfg.no_rope_layers if not v)
        return "SmolLM3ForCausalLM", cfg, 2 * (L - nope), x
    if name == "deepseek_v3":
        # MLA: rope on q_pe (all heads) and on one shared k_pe head, interleaved
        kw = common()
        kw.update(q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
                  v_head_dim=16, first_k_dense_replace=L, n_routed_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=32, n_group=1, topk_group=1, num_key_value_heads=HEADS)
        cfg = T.DeepseekV3Config(**kw, **rope_kw())
        return "DeepseekV3ForCausalLM", cfg, 2 * L, x
    if name == "deepseek_v4":
        # sliding-attention layers only: q rope, shared kv rope (trailing [nope|rope] channels,
        # interleaved, after QK-norm) and the conjugate rotation of the output: 3 sites per layer
        kw = common(num_key_value_heads=1)
        kw.pop("intermediate_size")
        kw.update(head_dim=32, q_lora_rank=32, moe_intermediate_size=32, n_routed_experts=4,
                  num_experts_per_tok=2, n_shared_experts=1, o_groups=2, o_lora_rank=32,
                  layer_types=["sliding_attention"] * L, mlp_layer_types=["moe"] * L,
                  sliding_window=4096, index_n_heads=2, index_head_dim=16, index_topk=4, hc_mult=2,
                  partial_rotary_factor=0.25)
        cfg = T.DeepseekV4Config(**kw)
        return "DeepseekV4ForCausalLM", cfg, 3 * L, {"dense_mlp": True}
    if name == "gpt_oss":
        kw = common()
        kw.pop("intermediate_size")
        cfg = T.GptOssConfig(head_dim=HEAD_DIM, intermediate_size=32, num_local_experts=4,
                             num_experts_per_tok=2, sliding_window=4096,
                             layer_types=["sliding_attention", "full_attention"], **kw,
                             **rope_kw("yarn", 150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                                       original_max_position_embeddings=4096, truncate=False))
        return "GptOssForCausalLM", cfg, 2 * L, {"dense_mlp": True}
    if name == "granite":
        cfg = T.GraniteConfig(**common(), **rope_kw())
        return "GraniteForCausalLM", cfg, 2 * L, x
    if name == "stablelm":
        kw = common()
        if TF_MAJOR >= 5:
            cfg = T.StableLmConfig(**kw, **rope_kw(partial_rotary_factor=0.25))
        else:
            cfg = T.StableLmConfig(**kw, partial_rotary_factor=0.25, **rope_kw())
        return "StableLmForCausalLM", cfg, 2 * L, x
    if name == "starcoder2":
        cfg = T.Starcoder2Config(**common(), sliding_window=None, **rope_kw())
        return "Starcoder2ForCausalLM", cfg, 2 * L, x
    if name == "nemotron":
        kw = common()
        if TF_MAJOR >= 5:
            cfg = T.NemotronConfig(**kw, **rope_kw(partial_rotary_factor=0.5))
        else:
            cfg = T.NemotronConfig(**kw, partial_rotary_factor=0.5, **rope_kw())
        return "NemotronForCausalLM", cfg, 2 * L, x
    if name == "glm":
        # GLM: partial 0.5, interleaved pairs, cos/sin repeat_interleave'd
        cfg = T.GlmConfig(head_dim=HEAD_DIM, **common(), **rope_kw())
        return "GlmForCausalLM", cfg, 2 * L, x
    if name == "exaone4":
        # hybrid attention: RoPE only in the sliding-window layers (with a sliding window set,
        # full-attention layers are NoPE), so one layer of each kind
        kw = common()
        kw["layer_types"] = (["sliding_attention", "full_attention"] * L)[:L]
        cfg = T.Exaone4Config(**kw, **rope_kw(theta=1000000.0))
        return "Exaone4ForCausalLM", cfg, 2 * ((L + 1) // 2), x
    if name == "ernie4_5":
        cfg = T.Ernie4_5Config(head_dim=HEAD_DIM, **common(), **rope_kw(theta=500000.0))
        return "Ernie4_5ForCausalLM", cfg, 2 * L, x
    if name in ("qwen2_vl_text", "qwen3_vl_text"):
        if name == "qwen2_vl_text":
            cfg = T.Qwen2VLTextConfig(**common(), **rope_kw(theta=1000000.0, mrope_section=[2, 3, 3]))
            cls = "Qwen2VLTextModel"
        else:
            cfg = T.Qwen3VLTextConfig(head_dim=HEAD_DIM, **common(),
                                      **rope_kw(theta=5000000.0, mrope_section=[4, 2, 2],
                                                mrope_interleaved=True))
            cls = "Qwen3VLTextModel"
        return cls + "+lm_head", cfg, 2 * L, {"mrope": True}
    if name in HELDOUT_SIMPLE:
        cfg_cls, model_cls, over, rope, sites_of, ext = HELDOUT_SIMPLE[name]
        kw = common()
        kw.update(over)
        cfg = getattr(T, cfg_cls)(**kw, **rope_kw(**rope))
        return model_cls, cfg, sites_of(cfg), dict(ext)
    if name == "falcon":
        # Falcon (new decoder architecture): one fused query_key_value projection, rotate_half
        cfg = T.FalconConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=L,
                             num_attention_heads=HEADS, num_kv_heads=KV_HEADS,
                             new_decoder_architecture=True, alibi=False, bias=False,
                             max_position_embeddings=2048, use_cache=False,
                             tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                             **rope_kw())
        return "FalconForCausalLM", cfg, 2 * L, x
    if name == "llama_linear":
        cfg = T.LlamaConfig(head_dim=HEAD_DIM, **common(), **rope_kw("linear", factor=4.0))
        return "LlamaForCausalLM", cfg, 2 * L, x
    if name == "codegen":
        # CodeGen: GPT-J-style interleaved rotation on a fused qkv split into mp_num groups
        cfg = T.CodeGenConfig(vocab_size=VOCAB, n_positions=2048, n_ctx=2048, n_embd=HIDDEN,
                              n_layer=L, n_head=HEADS, rotary_dim=8, n_inner=INTER,
                              use_cache=False, tie_word_embeddings=False, bos_token_id=1,
                              eos_token_id=2)
        return "CodeGenForCausalLM", cfg, 2 * L, x
    if name == "persimmon":
        kw = common()
        kw.pop("num_key_value_heads")
        if TF_MAJOR >= 5:
            cfg = T.PersimmonConfig(**kw, **rope_kw(theta=25000.0, partial_rotary_factor=0.5))
        else:
            cfg = T.PersimmonConfig(**kw, partial_rotary_factor=0.5, **rope_kw(theta=25000.0))
        return "PersimmonForCausalLM", cfg, 2 * L, x
    if name in ENCODERS:
        # encoders: bidirectional attention, (input_ids, attention_mask) in, positions from an
        # arange over the sequence inside the graph (no position_ids input)
        cfg_cls, model_cls, kw, sites_of = ENCODERS[name]
        cfg = getattr(T, cfg_cls)(**kw())
        return model_cls, cfg, sites_of(cfg), {"encoder": True}
    raise KeyError(name)


def _enc_common(**over):
    kw = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, intermediate_size=INTER, max_position_embeddings=512,
              pad_token_id=0)
    kw.update(over)
    return kw


# Encoder families with RoPE: name -> (config class, model class, config kwargs, rope sites)
ENCODERS = {
    # ModernBERT: fused Wqkv, rotate_half; local (sliding) and global layers with two thetas
    "modernbert": ("ModernBertConfig", "ModernBertModel",
                   lambda: _enc_common(max_position_embeddings=8192, bos_token_id=1,
                                       eos_token_id=2, cls_token_id=1, sep_token_id=2,
                                       local_attention=4,
                                       layer_types=["full_attention", "sliding_attention"]),
                   lambda c: 2 * c.num_hidden_layers),
    # RoFormer: a sinusoidal table (an embedding weight) sliced by sequence length, interleaved
    "roformer": ("RoFormerConfig", "RoFormerModel",
                 lambda: _enc_common(embedding_size=HIDDEN, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, use_cache=False),
                 lambda c: 2 * c.num_hidden_layers),
    # ESM (rotary): cos/sin from inv_freq over arange(seq), rotate_half
    "esm": ("EsmConfig", "EsmModel",
            lambda: _enc_common(position_embedding_type="rotary", hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0, mask_token_id=4,
                                use_cache=False),
            lambda c: 2 * c.num_hidden_layers),
    "eurobert": ("EuroBertConfig", "EuroBertModel",
                 lambda: _enc_common(num_key_value_heads=KV_HEADS, bos_token_id=1, eos_token_id=2,
                                     mask_token_id=4),
                 lambda c: 2 * c.num_hidden_layers),
    "nomic_bert": ("NomicBertConfig", "NomicBertModel", lambda: _enc_common(),
                   lambda c: 2 * c.num_hidden_layers),
}


def _all_layers(cfg):
    return 2 * cfg.num_hidden_layers


# Held-out families made from common() settings: name -> (config class, model class, config
# overrides, rope_kw arguments, rope sites from the config, extra)
HELDOUT_SIMPLE = {
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=32), dict(theta=1000000.0),
                  _all_layers, {"dense_mlp": True}),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              dict(num_experts=4, num_experts_per_tok=2), dict(), _all_layers, {"dense_mlp": True}),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM",
                   dict(num_local_experts=4, num_experts_per_tok=2), dict(), _all_layers,
                   {"dense_mlp": True}),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM",
               dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None), dict(),
               _all_layers, {"dense_mlp": True}),
    "cohere2": ("Cohere2Config", "Cohere2ForCausalLM",
                dict(layer_types=["sliding_attention", "full_attention"], sliding_window=4096),
                dict(), lambda c: 2 * sum(1 for t in c.layer_types if t == "sliding_attention"),
                {}),
    "helium": ("HeliumConfig", "HeliumForCausalLM", dict(head_dim=HEAD_DIM), dict(), _all_layers, {}),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", dict(head_dim=HEAD_DIM), dict(), _all_layers, {}),
    "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM", dict(head_dim=HEAD_DIM), dict(),
                 _all_layers, {}),
    "hunyuan_dense": ("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM",
                      dict(head_dim=HEAD_DIM), dict(), _all_layers, {}),
    "arcee": ("ArceeConfig", "ArceeForCausalLM", dict(head_dim=HEAD_DIM), dict(), _all_layers, {}),
    "apertus": ("ApertusConfig", "ApertusForCausalLM", dict(head_dim=HEAD_DIM), dict(),
                _all_layers, {}),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(), dict(), _all_layers, {}),
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM",
              dict(layer_types=["sliding_attention", "full_attention"], sliding_window=4096),
              dict(theta=500000.0), _all_layers, {}),
    "ministral": ("MinistralConfig", "MinistralForCausalLM",
                  dict(head_dim=HEAD_DIM, sliding_window=4096), dict(theta=1000000.0),
                  _all_layers, {}),
    "dots1": ("Dots1Config", "Dots1ForCausalLM",
              dict(head_dim=HEAD_DIM, first_k_dense_replace=LAYERS, n_routed_experts=4,
                   num_experts_per_tok=2, moe_intermediate_size=32, n_group=1, topk_group=1),
              dict(), _all_layers, {}),
    "bitnet": ("BitNetConfig", "BitNetForCausalLM", dict(head_dim=HEAD_DIM), dict(),
               _all_layers, {}),
    "diffllama": ("DiffLlamaConfig", "DiffLlamaForCausalLM", dict(head_dim=HEAD_DIM), dict(),
                  _all_layers, {}),
    "jetmoe": ("JetMoeConfig", "JetMoeForCausalLM",
               dict(num_local_experts=2, num_experts_per_tok=1, kv_channels=16,
                    num_key_value_heads=HEADS), dict(), _all_layers, {}),
    "nanochat": ("NanoChatConfig", "NanoChatForCausalLM", dict(), dict(), _all_layers, {}),
    "vaultgemma": ("VaultGemmaConfig", "VaultGemmaForCausalLM",
                   dict(head_dim=HEAD_DIM, sliding_window=4096), dict(), _all_layers, {}),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM",
                  dict(num_experts=2, num_experts_per_tok=1), dict(theta=500000.0), _all_layers,
                  {"dense_mlp": True}),
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM",
                dict(head_dim=HEAD_DIM, num_local_experts=2, num_experts_per_tok=1,
                     layer_types=["full_attention", "full_attention"], sliding_window=None),
                dict(), _all_layers, {"dense_mlp": True}),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                 dict(head_dim=HEAD_DIM, first_k_dense_replace=LAYERS, n_routed_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32, n_group=1, topk_group=1,
                      partial_rotary_factor=0.5, use_qk_norm=True), dict(), _all_layers, {}),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM",
                     dict(head_dim=HEAD_DIM, moe_num_experts=2, moe_k=1, moe_layer_start_index=LAYERS),
                     dict(theta=500000.0), _all_layers, {}),
    "hunyuan_moe": ("HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM",
                    dict(head_dim=HEAD_DIM, num_experts=2, moe_topk=1), dict(), _all_layers,
                    {"dense_mlp": True}),
    "solar_open": ("SolarOpenConfig", "SolarOpenForCausalLM", dict(head_dim=HEAD_DIM), dict(),
                   _all_layers, {"dense_mlp": True}),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM",
             dict(layer_types=["conv", "full_attention"]), dict(),
             lambda c: 2 * sum(1 for t in c.layer_types if t == "full_attention"), {}),
}


# (family, variant) -> settings. Variant keys: torch line (t211 / t29), exporter (dynamo /
# torchscript), shapes (dynamic / static), opset, dtype, past, external.
def V(fam, torch_line="t211", exporter="dynamo", shapes="dynamic", opset=18, dtype="float32",
      past=False, external=None, optimize=True, batch=None, seq=None):
    if external is None:  # torch's own layout (weights in <name>.onnx.data) for part of the matrix
        external = exporter == "dynamo" and (opset == 23 or past)
    if exporter == "torchscript":
        opset = 17 if opset == 18 else opset
    parts = [{"dynamo": "dyn" if shapes == "dynamic" else "static", "torchscript": "ts"}[exporter],
             f"o{opset}", {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]]
    if past:
        parts.append("kv")
    if batch is not None or seq is not None:  # example input shape other than the default
        parts.append(f"b{batch}s{seq}")
    if not optimize:  # torch.onnx.export(..., optimize=False)
        parts.append("noopt")
    if torch_line != "t211":
        parts.append(torch_line)
    return dict(name=f"{fam}__{'_'.join(parts)}", family=fam, torch_line=torch_line,
                exporter=exporter, shapes=shapes, opset=opset, dtype=dtype, past=past,
                external=external, optimize=optimize, batch=batch, seq=seq)


DEFAULT_FAMILIES = [
    "llama", "llama3_scaling", "mistral", "qwen2", "qwen3", "qwen3_yarn", "gemma", "phi3",
    "phi_partial", "gptj", "gpt_neox", "qwen2_vl_text", "qwen3_vl_text", "phi3_longrope",
    "gemma3_text", "cohere", "olmo2", "phi4_mini", "smollm3", "deepseek_v3", "deepseek_v4",
    "mistral_yarn", "qwen3_moe", "mixtral", "gpt_oss", "granite", "stablelm", "starcoder2",
    "nemotron", "glm", "exaone4", "ernie4_5", "gemma2", "llama_dynamic_ntk",
    # from the held-out check (HOLDOUT below): forms the families above do not have
    "falcon", "codegen", "cohere2", "nanochat",
]

MATRIX = [V(f) for f in DEFAULT_FAMILIES] + [
    # the other axes, interleaved so that a partial run still covers each of them
    V("llama", shapes="static"), V("llama", opset=23), V("llama", dtype="float16"),
    V("llama", past=True),
    V("qwen3", shapes="static"), V("qwen3", opset=23), V("qwen3", dtype="float16"),
    V("qwen3", past=True),
    V("cohere", shapes="static"), V("gemma3_text", opset=23), V("cohere", dtype="float16"),
    V("mistral", past=True),
    V("gptj", shapes="static"), V("olmo2", opset=23), V("gptj", dtype="float16"),
    V("olmo2", past=True),
    V("deepseek_v3", shapes="static"), V("deepseek_v4", opset=23),
    V("phi3_longrope", dtype="float16"), V("qwen2", shapes="static", past=True),
    V("gemma3_text", shapes="static"), V("glm", opset=23, dtype="float16"),
    V("deepseek_v3", dtype="float16"), V("granite", dtype="float16", past=True),
    V("phi4_mini", shapes="static"), V("smollm3", shapes="static"),
    V("olmo2", shapes="static", dtype="float16"), V("gemma", past=True), V("cohere", past=True),
    V("qwen2", shapes="static", opset=23), V("mistral_yarn", shapes="static"),
    # second torch line (2.9 + transformers 4.57): dynamo and TorchScript
    # (torch 2.9's export of the 4.57 decoders with dynamic shapes fails for every family here
    # but GPT-J: "8*s44 is not tracked with proxy"; their fixed-shape exports work)
    V("gptj", "t29"), V("llama", "t29", shapes="static", dtype="float16"),
    V("qwen3", "t29", shapes="static"), V("cohere", "t29", shapes="static"),
    V("phi3", "t29", shapes="static"), V("deepseek_v3", "t29", shapes="static"),
    V("gemma3_text", "t29", shapes="static"), V("qwen2", "t29", shapes="static", past=True),
    V("llama", "t29", "torchscript"), V("qwen3", "t29", "torchscript"),
    V("mistral", "t29", "torchscript"), V("gemma", "t29", "torchscript"),
    V("phi3", "t29", "torchscript"), V("gptj", "t29", "torchscript"),
    V("cohere", "t29", "torchscript"), V("olmo2", "t29", "torchscript"),
    V("phi_partial", "t29", "torchscript"), V("gpt_neox", "t29", "torchscript"),
    V("llama", "t29", "torchscript", dtype="float16"), V("phi4_mini", "t29", "torchscript"),
    V("gemma3_text", "t29", "torchscript"), V("stablelm", "t29", "torchscript"),
    # from the held-out check: optimize=False exports, decode-only fixed shapes (B=1, S=1),
    # opsets 21 and 22, Falcon's fused qkv from TorchScript
    V("gptj", optimize=False), V("llama", optimize=False),
    V("llama", shapes="static", batch=1, seq=1), V("llama", shapes="static", past=True, batch=1, seq=1),
    V("qwen3", opset=21), V("gemma3_text", opset=22), V("falcon", "t29", "torchscript"),
    # encoders (no position_ids: positions from an arange over the sequence in the graph)
] + [V(f) for f in ENCODERS] + [V("modernbert", shapes="static"), V("esm", shapes="static"),
                                 V("esm", "t29", "torchscript"), V("roformer", "t29", "torchscript"),
    # bfloat16 (onnxruntime's CPU EP cannot run these: the harness uses onnx's reference evaluator)
    V("esm", dtype="bfloat16"), V("llama", dtype="bfloat16")]

# A held-out set (not committed as fixtures): families and export settings beyond MATRIX, to
# check that `ropekit fuse` generalizes. `--holdout --out DIR` exports it into DIR.
HOLDOUT_FAMILIES = ["falcon", "llama_linear", "codegen", "persimmon"] + list(HELDOUT_SIMPLE)
HOLDOUT = [V(f) for f in HOLDOUT_FAMILIES] + [
    V(f, shapes="static") for f in ("roformer", "eurobert", "nomic_bert")] + [
    V("modernbert", "t29", "torchscript"), V("roformer", dtype="bfloat16")] + [
    V("llama", dtype="bfloat16"), V("qwen3", dtype="bfloat16"), V("gptj", dtype="bfloat16"),
    V("cohere", dtype="bfloat16"), V("falcon", dtype="bfloat16", past=True),
    V("llama", opset=20), V("qwen3", opset=21), V("gemma3_text", opset=22), V("gptj", opset=22),
    V("cohere", opset=21), V("deepseek_v3", opset=20), V("phi4_mini", opset=22),
    V("deepseek_v4", opset=21),
    V("llama", shapes="static", batch=1, seq=1), V("qwen3", shapes="static", batch=1, seq=1),
    V("gptj", shapes="static", batch=1, seq=1), V("deepseek_v3", shapes="static", batch=1, seq=1),
    V("cohere", shapes="static", batch=1, seq=1), V("glm", shapes="static", batch=1, seq=1),
    V("llama", shapes="static", past=True, batch=1, seq=1),
    V("gemma3_text", shapes="static", past=True, batch=1, seq=1),
    V("llama", optimize=False), V("qwen3", optimize=False), V("gptj", optimize=False),
    V("cohere", optimize=False), V("deepseek_v3", optimize=False), V("phi_partial", optimize=False),
    V("gemma3_text", optimize=False), V("glm", optimize=False), V("phi3_longrope", optimize=False),
    V("falcon", past=True), V("gpt_neox", past=True), V("phi3", past=True), V("glm", past=True),
    V("gemma2", past=True), V("deepseek_v3", past=True), V("gptj", past=True),
    V("phi4_mini", past=True), V("phi3_longrope", past=True), V("smollm3", past=True),
    V("cohere2", past=True), V("gemma3_text", past=True), V("llama_linear", past=True),
    V("qwen3_vl_text", past=True), V("deepseek_v4", past=True),
    V("falcon", "t29", "torchscript"), V("granite", "t29", "torchscript"),
    V("starcoder2", "t29", "torchscript"), V("glm", "t29", "torchscript"),
    V("qwen2", "t29", "torchscript"), V("helium", "t29", "torchscript"),
    V("cohere2", "t29", "torchscript"), V("qwen2_moe", "t29", "torchscript"),
    V("olmoe", "t29", "torchscript"), V("seed_oss", "t29", "torchscript"),
    V("arcee", "t29", "torchscript"), V("gemma2", "t29", "torchscript"),
    V("persimmon", "t29", "torchscript"), V("codegen", "t29", "torchscript"),
    V("glm4", "t29", "torchscript"), V("deepseek_v3", "t29", "torchscript"),
    V("llama_linear", "t29", "torchscript"), V("qwen2", "t29", "torchscript", past=True),
    V("llama", "t29", "torchscript", past=True), V("phi3", "t29", "torchscript", past=True),
    V("gptj", "t29", "torchscript", past=True), V("llama", "t29", "torchscript", opset=14),
    V("falcon", "t29", shapes="static"), V("glm4", "t29", shapes="static"),
    V("helium", "t29", shapes="static"), V("apertus", "t29", shapes="static"),
    V("llama", "t29", shapes="static", dtype="bfloat16"),
]


class TextLM(nn.Module):
    def __init__(self, text_model, config):
        super().__init__()
        self.model = text_model
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.config = config

    def forward(self, input_ids, position_ids, past_key_values=None, use_cache=False, **kw):
        out = self.model(input_ids=input_ids, position_ids=position_ids,
                         past_key_values=past_key_values, use_cache=use_cache, **kw)
        return type("O", (), {"logits": self.lm_head(out.last_hidden_state)})()


def build(fam, dtype, attn="sdpa"):
    cls, cfg, sites, extra = family(fam)
    try:
        cfg._attn_implementation = attn
    except Exception:
        pass
    torch.manual_seed(SEED)
    try:
        if cls.endswith("+lm_head"):
            model = TextLM(getattr(transformers, cls.split("+")[0])(cfg), cfg)
        else:
            model = getattr(transformers, cls)(cfg)
    except (ValueError, KeyError) as e:  # a family without an SDPA path (DeepSeek-V4), or
        # without the attention-function registry (Falcon's own classes): eager attention
        if isinstance(e, ValueError) and "attention implementation" not in str(e):
            raise
        cfg._attn_implementation = "eager"
        torch.manual_seed(SEED)
        model = getattr(transformers, cls)(cfg)
    if extra.get("dense_mlp"):
        for layer in model.model.layers:
            attr = "block_sparse_moe" if hasattr(layer, "block_sparse_moe") else "mlp"
            setattr(layer, attr, DenseMLP(cfg.hidden_size, INTER, pair=fam == "gpt_oss"))
    model.eval()
    if dtype in ("float16", "bfloat16"):
        model = model.to(getattr(torch, dtype))
        cfg.dtype = dtype
    return cls, cfg, sites, extra, model


class NoCache(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, input_ids, position_ids):
        return self.inner(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits


class Encoder(nn.Module):
    """Encoder graph: input_ids and attention_mask in, the last hidden state out."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, input_ids, attention_mask):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class WithPast(nn.Module):
    """Decode graph: flat past_key_i / past_value_i in, logits and present_* out."""

    def __init__(self, model, cfg, layers):
        super().__init__()
        self.inner, self.cfg, self.layers = model, cfg, layers

    def forward(self, input_ids, position_ids, *past):
        from transformers import DynamicCache
        cache = DynamicCache(config=self.cfg) if TF_MAJOR >= 5 else DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.inner(input_ids=input_ids, position_ids=position_ids, past_key_values=cache,
                         use_cache=True)
        flat = []
        for i in range(self.layers):
            lay = cache.layers[i]
            flat += [lay.keys, lay.values]
        return (out.logits, *flat)


def kv_shape(cfg, b, p):
    nkv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return (b, nkv, p, hd)


def example_inputs(cfg, extra, past, dtype, b, s, p, offset=0, seed=SEED):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (b, s), generator=gen, dtype=torch.int64)
    start = (p if past else 0) + offset
    pos = torch.arange(start, start + s, dtype=torch.int64).unsqueeze(0).expand(b, s).contiguous()
    if extra.get("mrope"):
        pos = pos.unsqueeze(0).expand(3, b, s).contiguous()
    if extra.get("encoder"):  # a padded batch: the last row's final token masked out
        mask = torch.ones((b, s), dtype=torch.int64)
        if b > 1 and s > 1:
            mask[-1, -1] = 0
        return (ids, mask)
    args = [ids, pos]
    if past:
        tdt = getattr(torch, dtype)
        for _ in range(cfg.num_hidden_layers):
            args.append(torch.randn(kv_shape(cfg, b, p), generator=gen).to(tdt))
            args.append(torch.randn(kv_shape(cfg, b, p), generator=gen).to(tdt))
    return tuple(args)


def names_for(cfg, past, extra=None):
    if (extra or {}).get("encoder"):
        return ["input_ids", "attention_mask"], ["last_hidden_state"]
    ins, outs = ["input_ids", "position_ids"], ["logits"]
    if past:
        for i in range(cfg.num_hidden_layers):
            ins += [f"past_key_{i}", f"past_value_{i}"]
            outs += [f"present_key_{i}", f"present_value_{i}"]
    return ins, outs


def export_one(v, outdir):
    import onnx
    attn = "sdpa"
    if TF_MAJOR < 5:
        # 4.x: GPT-J and StableLM have no SDPA path here; TorchScript cannot trace the vmap SDPA
        # mask (use the vmap-free one); torch 2.9's export fails on the 4.x SDPA masks with
        # dynamic shapes ("... is not tracked with proxy"), so dynamo exports use eager attention
        # (4.x's encoders keep their own attention registries: eager there too)
        if v["family"] in ("gptj", "stablelm") or v["exporter"] == "dynamo" or \
                v["family"] in ENCODERS:
            attn = "eager"
        else:
            attn = register_ts_attention()
    cls, cfg, sites, extra, model = build(v["family"], v["dtype"], attn)
    past = v["past"]
    enc = extra.get("encoder", False)
    assert not (enc and past), "encoders have no past key/values"
    wrapper = Encoder(model) if enc else WithPast(model, cfg, cfg.num_hidden_layers) if past \
        else NoCache(model)
    wrapper.eval()
    b, s, p = (PAST_B, PAST_S, PAST_P) if past else (EXPORT_B, EXPORT_S, 0)
    b, s = v.get("batch") or b, v.get("seq") or s
    args = example_inputs(cfg, extra, past, v["dtype"], b, s, p)
    ins, outs = names_for(cfg, past, extra)
    path = os.path.join(outdir, v["name"] + ".onnx")
    for old in (path, path + ".data"):
        if os.path.exists(old):
            os.remove(old)
    mrope = extra.get("mrope", False)
    with torch.no_grad():
        if v["exporter"] == "torchscript":
            axes = None
            if v["shapes"] == "dynamic":
                axes = {"input_ids": {0: "batch", 1: "sequence"},
                        ins[1]: {1: "batch", 2: "sequence"} if mrope else
                        {0: "batch", 1: "sequence"}, outs[0]: {0: "batch", 1: "sequence"}}
                for n in ins[2:]:
                    axes[n] = {0: "batch", 2: "past_sequence"}
                for n in outs[1:]:
                    axes[n] = {0: "batch", 2: "total_sequence"}
            torch.onnx.export(wrapper, args, path, input_names=ins, output_names=outs,
                              opset_version=v["opset"], dynamo=False, dynamic_axes=axes)
        else:
            dyn = None
            if v["shapes"] == "dynamic":
                B = torch.export.Dim("batch", min=1, max=64)
                S = torch.export.Dim("sequence", min=1 if past else 2, max=4096)
                dyn = [{0: B, 1: S}, ({1: B, 2: S} if mrope else {0: B, 1: S})]
                if past:  # *past is one var-positional argument: its shapes go in one tuple
                    P = torch.export.Dim("past_sequence", min=1, max=4096)
                    dyn.append(tuple({0: B, 2: P} for _ in range(2 * cfg.num_hidden_layers)))
                dyn = tuple(dyn)
            prog = torch.onnx.export(wrapper, args, None, input_names=ins, output_names=outs,
                                     dynamo=True, dynamic_shapes=dyn, opset_version=v["opset"],
                                     optimize=v.get("optimize", True))
            # torch's layout for part of the matrix: weights in <name>.onnx.data beside it
            prog.save(path, external_data=v["external"])
            m = onnx.load(path, load_external_data=False)  # data file stays as torch wrote it
            for node in m.graph.node:  # drop per-node torch metadata: local paths, 2/3 of the size
                del node.metadata_props[:]
            onnx.save(m, path)
    # check the export against torch (a fresh model: export can leave state in the module)
    import ml_dtypes
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    fresh = build(v["family"], v["dtype"], attn)[4]
    fw = Encoder(fresh) if enc else WithPast(fresh, cfg, cfg.num_hidden_layers) if past \
        else NoCache(fresh)
    checks = []
    tries = [(b, s, p, 0)]
    if v["shapes"] == "dynamic":
        tries += [(1, 5, p + 4 if past else 0, 3)]
    try:
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's CPU EP has no bfloat16 kernels for most ops
        if v["dtype"] != "bfloat16" or "NOT_IMPLEMENTED" not in str(e):
            raise
        checks.append({"error": "onnxruntime (CPU) cannot run it: " + str(e)[:200]})
        tries = []
    for tb, ts_, tp, off in tries:
        a = example_inputs(cfg, extra, past, v["dtype"], tb, ts_, tp, offset=off, seed=SEED + 7)
        with torch.no_grad():
            ref = fw(*a)
        ref = ref[0] if isinstance(ref, tuple) else ref
        feeds = {n: (t.float().numpy().astype(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16
                     else t.numpy()) for n, t in zip(ins, a)}
        got = sess.run(None, feeds)[0].astype(np.float32)
        ref = ref.float().numpy()
        checks.append({"shape": [tb, ts_, tp], "max_abs_diff": float(np.abs(got - ref).max()),
                       "max_abs_ref": float(np.abs(ref).max())})
    with tempfile.TemporaryDirectory() as td:
        cfg.save_pretrained(td)
        with open(os.path.join(td, "config.json")) as src, \
                open(os.path.join(outdir, v["name"] + ".config.json"), "w") as dst:
            dst.write(src.read())
    m = onnx.load(path, load_external_data=False)
    entry = {
        "family": v["family"], "arch": cls,
        "settings": {k: v[k] for k in ("exporter", "shapes", "opset", "dtype", "past", "external")
                     + (("optimize",) if not v.get("optimize", True) else ())},
        "torch": torch.__version__, "transformers": transformers.__version__,
        "inputs": [{"name": i.name, "shape": [d.dim_param or d.dim_value for d in
                                              i.type.tensor_type.shape.dim],
                    "elem_type": i.type.tensor_type.elem_type} for i in m.graph.input],
        "export_shape": [b, s, p],
        "max_position_embeddings": getattr(cfg, "max_position_embeddings", None)
        or getattr(cfg, "n_positions", None),
        "rope_sites": sites,
        "expect_fused": extra.get("fused", sites),
        "expect_unfused_reasons": extra.get("reasons", []),
        "mrope": extra.get("mrope", False),
        **({"encoder": True} if enc else {}),
        "export_check": checks,
    }
    return entry


# ---------------------------------------------------------------------------------------------
# onnxruntime's own RotaryEmbedding fusion test graphs (tests/fixtures/ort_fusion/): the graphs
# as its generators write them (committed as made; the generators are not part of this project)
# and, where a graph does not run in onnxruntime as written, a minimally repaired twin.

ORT_DIR = os.path.join(ROOT, "tests", "fixtures", "ort_fusion")
HF_INT_CONSTANTS = ("pos_ids_new_shape", "zero", "one", "two", "three", "int_max")


def _toposort(graph):
    have = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    order, todo = [], list(graph.node)
    while todo:
        n = next(n for n in todo if all(x in have for x in n.input if x))
        todo.remove(n)
        order.append(n)
        have.update(n.output)
    del graph.node[:]
    graph.node.extend(order)


def repair_hf_decoder(m, squeeze):
    """test_rotary_embedding_fusion.py's HF decoder graphs do not load: their integer constants
    are stored as FLOAT, the nodes are out of order, a shape dimension is read with a [1]-shaped
    index (so Slice gets 2-D starts), the caches are 2-D but sliced on axis 2 (then squeezed
    twice on axis 0 in the `squeeze` form), and the merged graph declares an int64 output as
    float. Repair exactly those; the rotation and the cache gather are left as written."""
    import onnx
    from onnx import TensorProto, numpy_helper
    m = onnx.ModelProto.FromString(m.SerializeToString())
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.name in HF_INT_CONSTANTS:
            vals = [min(int(v), 2**63 - 1) for v in numpy_helper.to_array(t).astype(np.float64)]
            g.initializer[i].CopyFrom(numpy_helper.from_array(np.array(vals, np.int64), t.name))
        elif squeeze and t.name in ("cos_cache", "sin_cache"):
            a = numpy_helper.to_array(t)
            g.initializer[i].CopyFrom(numpy_helper.from_array(a.reshape(1, 1, *a.shape), t.name))
    g.initializer.extend([numpy_helper.from_array(np.array(2, np.int64), "two_scalar"),
                          numpy_helper.from_array(np.array(3, np.int64), "three_scalar")])
    for n in g.node:
        if n.op_type == "Gather" and n.input[0] in ("x_shape", "curr_shape", "past_shape"):
            n.input[1] += "_scalar"
        if n.op_type == "Div" and n.input[0] == "x_last_idx_shape":
            n.input[1] = "two_scalar"
        if not squeeze and n.op_type == "Slice" and n.input[0] in ("cos_cache", "sin_cache"):
            n.input[3] = "zero"
    for o in g.output:
        if o.name == "past_seq_len_plus_zero":
            o.type.tensor_type.elem_type = TensorProto.INT64
    _toposort(g)
    return m


def repair_qwen3_decoder(m, n_rep):
    """qwen3_model_generator.py's decoder layer multiplies 8 query heads with 2 key heads (no
    repeat_kv): Tile the keys and values over the heads before attention. RoPE untouched."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto.FromString(m.SerializeToString())
    g = m.graph
    g.initializer.append(numpy_helper.from_array(np.array([1, n_rep, 1, 1], np.int64), "repair_kv_reps"))
    new = []
    for n in g.node:
        if n.name == "k_transpose_for_matmul" or n.name == "attn_v_matmul":
            k = 0 if n.name == "k_transpose_for_matmul" else 1
            src = n.input[k]
            new.append(helper.make_node("Tile", [src, "repair_kv_reps"], [src + "_rep"],
                                        name="repair_tile_" + src))
            n.input[k] = src + "_rep"
        new.append(n)
    del g.node[:]
    g.node.extend(new)
    _toposort(g)
    return m


ORT_GRAPHS = {
    # name: (rope sites, target fused, reasons when unfused, allowed positions [lo, hi) or None)
    "hf_decoder_no_past": (1, 1, [], [0, 8]),
    "hf_decoder_no_past_squeeze": (1, 1, [], [0, 8]),
    "hf_decoder_past": (1, 1, [], [0, 10]),
    "hf_decoder_past_squeeze": (1, 1, [], [0, 10]),
    "hf_decoder_merged": (1, 1, [], [0, 10]),
    "hf_decoder_merged_squeeze": (1, 1, [], [0, 10]),
    "qwen3_decoder": (0, 0, [], None),
    "qwen3_decoder_rope": (2, 2, [], None),
    "qwen3_decoder_rope_expand": (2, 2, [], None),
    "qwen3_decoder_rope_dynamic_inv_freq": (2, 0, ["graph input", "inv_freq"], None),
}


def make_ort_fusion():
    import onnx
    import onnxruntime as ort
    expect = {}
    for name, (sites, fused, reasons, prange) in ORT_GRAPHS.items():
        path = os.path.join(ORT_DIR, name + ".onnx")
        m = onnx.load(path)
        try:
            ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            loads = True
        except Exception as e:
            loads = False
            why = f"{type(e).__name__}: {str(e)[:300]}"
        entry = {"source": "onnxruntime test generator", "rope_sites": sites, "loads_in_ort": loads}
        if loads:
            entry.update(expect_fused=fused, expect_unfused_reasons=reasons, position_range=prange)
        else:
            entry.update(load_error=why, expect_fused=None, repaired_twin=name + ".repaired",
                         note="the original does not run: fuse must not crash; parity on the twin")
            twin = (repair_hf_decoder(m, name.endswith("_squeeze")) if name.startswith("hf_")
                    else repair_qwen3_decoder(m, 4))
            onnx.checker.check_model(twin, full_check=True)
            onnx.save(twin, os.path.join(ORT_DIR, name + ".repaired.onnx"))
            ort.InferenceSession(os.path.join(ORT_DIR, name + ".repaired.onnx"),
                                 providers=["CPUExecutionProvider"])
            expect[name + ".repaired"] = {
                "source": f"minimal repair of {name}.onnx (scripts/make_fusion_matrix.py --ort-fusion)",
                "rope_sites": sites, "loads_in_ort": True, "expect_fused": fused,
                "expect_unfused_reasons": reasons, "position_range": prange}
        expect[name] = entry
    with open(os.path.join(ORT_DIR, "expect.json"), "w") as f:
        json.dump(dict(sorted(expect.items())), f, indent=1)
        f.write("\n")
    for k, v in sorted(expect.items()):
        print(k, "loads" if v["loads_in_ort"] else "does not load", v["rope_sites"], v["expect_fused"])


def merge(out, others):
    import shutil
    for jf in ("expect.json", "export_log.json"):
        p = os.path.join(out, jf)
        acc = json.load(open(p)) if os.path.exists(p) else {}
        for o in others:
            q = os.path.join(o, jf)
            if os.path.exists(q):
                acc.update(json.load(open(q)))
        with open(p, "w") as f:
            json.dump(dict(sorted(acc.items())), f, indent=1)
            f.write("\n")
    for o in others:
        for fn in os.listdir(o):
            if fn.endswith((".onnx", ".onnx.data", ".config.json")):
                shutil.copy2(os.path.join(o, fn), os.path.join(out, fn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--holdout", action="store_true",
                    help="export the held-out set HOLDOUT instead of MATRIX (use --out)")
    ap.add_argument("--variants-only", action="store_true", help="skip the default forms")
    ap.add_argument("--merge-from", nargs="*", default=[],
                    help="move the models of other --out folders (parallel runs) into --out")
    ap.add_argument("--ort-fusion", action="store_true",
                    help="write the repaired twins and expect.json of tests/fixtures/ort_fusion")
    args = ap.parse_args()
    if args.ort_fusion:
        return make_ort_fusion()
    if args.merge_from:
        return merge(args.out, args.merge_from)
    todo = [v for v in (HOLDOUT if args.holdout else MATRIX) if v["torch_line"] == TORCH_LINE]
    if args.only:  # in the order given
        todo = [v for o in args.only for v in todo if v["name"] == o or v["family"] == o]
    if args.variants_only:
        todo = [v for v in todo if v["family"] not in DEFAULT_FAMILIES or v != V(v["family"])]
    if args.list:
        for v in (HOLDOUT if args.holdout else MATRIX):
            print(v["name"], "(this venv)" if v["torch_line"] == TORCH_LINE else "")
        return
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(2)
    ep = os.path.join(args.out, "expect.json")
    lp = os.path.join(args.out, "export_log.json")
    expect = json.load(open(ep)) if os.path.exists(ep) else {}
    log = json.load(open(lp)) if os.path.exists(lp) else {}
    for v in todo:
        try:
            entry = export_one(v, args.out)
            expect[v["name"]] = entry
            log[v["name"]] = {"export": "ok", "torch": torch.__version__,
                              "check": entry["export_check"]}
            print(v["name"], "ok", json.dumps(entry["export_check"]), flush=True)
        except Exception as e:
            expect.pop(v["name"], None)
            for f in (".onnx", ".onnx.data", ".config.json"):
                if os.path.exists(os.path.join(args.out, v["name"] + f)):
                    os.remove(os.path.join(args.out, v["name"] + f))
            log[v["name"]] = {"export": "failed", "torch": torch.__version__,
                              "error": f"{type(e).__name__}: {str(e)[:600]}"}
            print(v["name"], "FAILED", f"{type(e).__name__}: {str(e)[:300]}", flush=True)
            traceback.print_exc(limit=2)
        # written after every model so an interrupted run keeps what it made
        with open(ep, "w") as f:
            json.dump(dict(sorted(expect.items())), f, indent=1)
            f.write("\n")
        with open(lp, "w") as f:
            json.dump(dict(sorted(log.items())), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
