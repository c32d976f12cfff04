"""What the fixture generators share to build tiny random-weight transformers decoders:
the sizes, the RoPE settings in the form the installed transformers wants, the common config
arguments, Phi-3 longrope factors and TorchScript's SDPA attention for transformers 4.x.

Used by scripts/make_onnx_fixtures.py (tests/fixtures/models) and scripts/make_fusion_matrix.py
(tests/fixtures/matrix); each passes its own vocabulary and MLP sizes to common().
"""

import transformers

TF_MAJOR = int(transformers.__version__.split(".")[0])

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 2, 4, 2, 16
SEED = 1234


def rope_kw(rope_type="default", theta=10000.0, **extra):
    """RoPE settings as the installed transformers wants them (rope_parameters in 5.x,
    rope_theta + rope_scaling in 4.x, partial_rotary_factor beside them)."""
    if TF_MAJOR >= 5:
        d = {"rope_type": rope_type, "rope_theta": theta}
        d.update(extra)
        return {"rope_parameters": d}
    kw = {"rope_theta": theta}
    if "partial_rotary_factor" in extra:
        kw["partial_rotary_factor"] = extra.pop("partial_rotary_factor")
    if rope_type != "default" or extra:
        d = {"rope_type": rope_type, "type": rope_type}  # 4.x configs read either key
        if rope_type == "longrope":  # 4.x Phi3Config wants exactly type/short_factor/long_factor
            del d["rope_type"]
        d.update(extra)
        kw["rope_scaling"] = d
    return kw


def common(vocab, inter, **over):
    """Config arguments of every decoder: the sizes above, vocabulary and MLP size given."""
    kw = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
              num_key_value_heads=KV_HEADS, vocab_size=vocab, intermediate_size=inter,
              max_position_embeddings=2048, tie_word_embeddings=False, use_cache=False,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kw.update(over)
    return kw


def longrope_factors(n):
    """Phi-3.5-style short and long factors for n frequencies."""
    short = [round(1.0 + 0.1 * (i / (n - 1)) ** 2, 6) for i in range(n)]
    long_ = [round(1.0 + 59.0 * (i / (n - 1)) ** 3, 6) for i in range(n)]
    return short, long_


def register_ts_attention():
    """transformers 4.5x's SDPA mask uses torch.vmap, which TorchScript cannot trace: use the
    vmap-free mask builder that transformers' ExecuTorch integration registers (same attention,
    same RoPE). Returns the attention implementation's name."""
    from transformers.integrations.executorch import sdpa_mask_without_vmap
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa_without_vmap", sdpa_mask_without_vmap)
    ALL_ATTENTION_FUNCTIONS.register("sdpa_without_vmap", ALL_ATTENTION_FUNCTIONS["sdpa"])
    return "sdpa_without_vmap"
