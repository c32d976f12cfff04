#!/usr/bin/env python3
"""Generate reference cos/sin table fixtures for ropekit's RoPE table builders.

Uses Hugging Face transformers' own RoPE init functions
(transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS, or the model class's
compute_default_rope_parameters for rope_type "default") and the model's
RotaryEmbedding module forward to produce float32 reference tables.

Needs torch + transformers 5.x (written against transformers 5.24.0), numpy.
Usage (from the repository root):
    /work/venvs/torch/bin/python scripts/make_rope_table_fixtures.py [--out tests/fixtures/rope_tables]

One JSON file is written per case; see tests/fixtures/rope_tables/README.md for
the schema and for the formulas transformers uses.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, Phi3Config, PhiConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi.modeling_phi import PhiRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

BASE_POSITIONS = [0, 1, 2, 3, 7, 100, 1000, 4095, 4096, 8191, 32767, 131071]

PARAM_KEYS = [
    "factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
    "mscale_all_dim", "attention_factor", "truncate", "low_freq_factor", "high_freq_factor",
    "long_factor", "short_factor",
]


def phi3_like_factors(n):
    """Deterministic, Phi-3-shaped (monotone, short ~1.0-1.1, long ~1.0-60) factor lists of length n."""
    short = [round(1.0 + 0.1 * (i / (n - 1)) ** 2, 6) for i in range(n)]
    long_ = [round(1.0 + 59.0 * (i / (n - 1)) ** 3, 6) for i in range(n)]
    return short, long_


SHORT64, LONG64 = phi3_like_factors(64)

# Each case: module family, head_dim, partial_rotary_factor, theta, max_position_embeddings,
# rope_type, params actually passed in rope_parameters, seq_len passed to the init function,
# and optionally a position cap (longrope short selection needs max position < original max).
CASES = [
    dict(name="default_theta1e4_d128", family="llama", head_dim=128, prf=1.0, theta=10000.0,
         max_pos=32768, rope_type="default", params={}),
    dict(name="default_theta1e6_d128", family="llama", head_dim=128, prf=1.0, theta=1000000.0,
         max_pos=131072, rope_type="default", params={}),
    dict(name="default_partial0.5_d64", family="phi", head_dim=64, prf=0.5, theta=10000.0,
         max_pos=2048, rope_type="default", params={}),
    dict(name="linear_factor4_d128", family="llama", head_dim=128, prf=1.0, theta=10000.0,
         max_pos=16384, rope_type="linear", params={"factor": 4.0}),
    dict(name="yarn_factor4_omax4096_d128", family="llama", head_dim=128, prf=1.0, theta=10000.0,
         max_pos=16384, rope_type="yarn",
         params={"factor": 4.0, "original_max_position_embeddings": 4096}),
    dict(name="yarn_qwen3_factor4_omax32768_d128", family="llama", head_dim=128, prf=1.0,
         theta=1000000.0, max_pos=131072, rope_type="yarn",
         params={"factor": 4.0, "original_max_position_embeddings": 32768}),
    dict(name="yarn_deepseek_v3_factor40_d64", family="llama", head_dim=64, prf=1.0, theta=10000.0,
         max_pos=163840, rope_type="yarn",
         params={"factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                 "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}),
    dict(name="yarn_mscale_ratio_synthetic_d64", family="llama", head_dim=64, prf=1.0, theta=10000.0,
         max_pos=163840, rope_type="yarn",
         params={"factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                 "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}),
    dict(name="yarn_gptoss_truncate_false_d64", family="llama", head_dim=64, prf=1.0, theta=150000.0,
         max_pos=131072, rope_type="yarn",
         params={"factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                 "beta_slow": 1.0, "truncate": False}),
    dict(name="longrope_phi3_short_d128", family="phi3", head_dim=128, prf=1.0, theta=10000.0,
         max_pos=131072, rope_type="longrope",
         params={"original_max_position_embeddings": 4096, "short_factor": SHORT64, "long_factor": LONG64},
         seq_len=4096, pos_cap=4096),
    dict(name="longrope_phi3_long_d128", family="phi3", head_dim=128, prf=1.0, theta=10000.0,
         max_pos=131072, rope_type="longrope",
         params={"original_max_position_embeddings": 4096, "short_factor": SHORT64, "long_factor": LONG64},
         seq_len=4097),
    dict(name="llama3_factor8_d128", family="llama", head_dim=128, prf=1.0, theta=500000.0,
         max_pos=131072, rope_type="llama3",
         params={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}),
]

NUM_HEADS = 4


def f32(x):
    """Python float that is exactly the float32 value (repr round-trips through float32)."""
    return float(np.float32(x))


def build(case):
    rope_parameters = {"rope_type": case["rope_type"], "rope_theta": case["theta"]}
    rope_parameters.update(case["params"])
    common = dict(num_hidden_layers=1, vocab_size=128, intermediate_size=64,
                  num_attention_heads=NUM_HEADS, hidden_size=case["head_dim"] * NUM_HEADS,
                  max_position_embeddings=case["max_pos"], bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
    fam = case["family"]
    if fam == "llama":
        assert case["prf"] == 1.0
        cfg = LlamaConfig(head_dim=case["head_dim"], rope_parameters=rope_parameters, **common)
        mod_cls = LlamaRotaryEmbedding
    elif fam == "phi":
        cfg = PhiConfig(partial_rotary_factor=case["prf"], rope_parameters=rope_parameters, **common)
        mod_cls = PhiRotaryEmbedding
    elif fam == "phi3":
        omax = case["params"]["original_max_position_embeddings"]
        rp = dict(rope_parameters)
        rp.pop("original_max_position_embeddings")
        cfg = Phi3Config(original_max_position_embeddings=omax, rope_parameters=rp, **common)
        mod_cls = Phi3RotaryEmbedding
    else:
        raise ValueError(fam)
    return cfg, mod_cls


def make_case(case):
    cfg, mod_cls = build(case)
    d = int(case["head_dim"] * case["prf"])
    half = d // 2
    seq_len = case.get("seq_len")
    if case["rope_type"] == "default":
        inv_freq, attn = mod_cls.compute_default_rope_parameters(cfg)
    else:
        inv_freq, attn = ROPE_INIT_FUNCTIONS[case["rope_type"]](cfg, None, seq_len=seq_len)
    inv_freq = inv_freq.to(torch.float32)
    assert inv_freq.shape == (half,), (inv_freq.shape, half)

    cap = min(case["max_pos"], case.get("pos_cap", case["max_pos"]))
    positions = [p for p in BASE_POSITIONS if p < cap]
    if cap - 1 not in positions:
        positions.append(cap - 1)
    positions = sorted(positions)

    module = mod_cls(cfg)
    x = torch.zeros(1, dtype=torch.float32)
    pos = torch.tensor([positions], dtype=torch.int64)
    with torch.no_grad():
        cos, sin = module(x, pos)
    cos, sin = cos[0], sin[0]
    assert cos.dtype == torch.float32 and cos.shape == (len(positions), d)
    # full-width output is concat(freqs, freqs): both halves must be identical
    assert torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
    # the module must have used the same inv_freq / attention factor as the init function
    assert torch.equal(module.inv_freq.to(torch.float32), inv_freq), case["name"]
    assert module.attention_scaling == attn, (module.attention_scaling, attn)

    params = {k: case["params"].get(k) for k in PARAM_KEYS}
    return {
        "name": case["name"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "rope_type": case["rope_type"],
        "head_dim": case["head_dim"],
        "partial_rotary_factor": float(case["prf"]),
        "rotary_dim": d,
        "rope_theta": float(case["theta"]),
        "max_position_embeddings": case["max_pos"],
        "params": params,
        "seq_len": seq_len,
        "inv_freq": [f32(v) for v in inv_freq.tolist()],
        "attention_factor": float(attn),
        "positions": positions,
        "cos": [[f32(v) for v in row] for row in cos[:, :half].tolist()],
        "sin": [[f32(v) for v in row] for row in sin[:, :half].tolist()],
    }


def self_check(fx):
    """Re-derive the tables from the fixture's own inv_freq with numpy float32 arithmetic
    (angle = f32(f32(p) * inv), cos/sin in float32, times f32(attention_factor)) and report
    the worst absolute difference against the torch output."""
    inv = np.array(fx["inv_freq"], dtype=np.float32)
    p = np.array(fx["positions"], dtype=np.float32)[:, None]
    ang = (p * inv).astype(np.float32)
    a = np.float32(fx["attention_factor"])
    c = (np.cos(ang.astype(np.float64)).astype(np.float32) * a).astype(np.float32)
    s = (np.sin(ang.astype(np.float64)).astype(np.float32) * a).astype(np.float32)
    dc = np.abs(c - np.array(fx["cos"], dtype=np.float32)).max()
    ds = np.abs(s - np.array(fx["sin"], dtype=np.float32)).max()
    return float(max(dc, ds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "rope_tables"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for case in CASES:
        fx = make_case(case)
        path = os.path.join(args.out, case["name"] + ".json")
        text = json.dumps(fx, separators=(",", ":"))
        with open(path + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(path + ".tmp", path)
        err = self_check(fx)
        print(f"{case['name']}: d={fx['rotary_dim']} attn={fx['attention_factor']!r} "
              f"positions={len(fx['positions'])} bytes={len(text) + 1} "
              f"numpy-recompute max|diff|={err:.3g}")
        if len(text) >= 60 * 1024:
            print("  WARNING: file >= 60 KB", file=sys.stderr)


if __name__ == "__main__":
    main()
