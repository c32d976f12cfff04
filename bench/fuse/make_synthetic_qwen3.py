#!/usr/bin/env python3
"""Synthetic full-size Qwen3 decoder in ONNX, built without torch (onnx.helper + numpy).

Dimensions of Qwen3-0.6B (hidden 1024, 28 layers, 16 query heads, 8 KV heads, head_dim 128,
intermediate 3072, RMSNorm eps 1e-6, rope theta 1e6, q_norm/k_norm before RoPE), float32, random
weights (normal * 0.02; norm weights 1 + 0.1 * normal) stored as EXTERNAL DATA
(`model.onnx` + `model.onnx.data`, one file). The vocabulary defaults to 32000 instead of 151936
and lm_head is a separate (untied) matrix, to keep the file ~2 GB; `--vocab 151936` gives the real
size (~3 GB).

The RoPE part is node for node the shape of the torch.onnx dynamo fixture
tests/fixtures/models/qwen3.onnx (transformers 5.24):
  position_ids -> Unsqueeze(axis 2) -> Cast(float) -> Mul(inv_freq (64,), an initializer)
  -> Concat(freqs, freqs, axis -1) -> Cos, Sin (shared by all layers) -> Unsqueeze(axis 1) each,
  per layer, for q and k: MatMul -> Reshape(B, S, -1, 128; allowzero 1, shape from Shape nodes)
  -> RMSNorm (Pow, ReduceMean, Add eps, Sqrt, Reciprocal, Mul, Mul weight) -> Transpose(0,2,1,3)
  -> Add(Mul(x, cos_u), Mul(Concat(Neg(Slice(x, 64:INT64_MAX)), Slice(x, 0:64)), sin_u)).
The rest is a plain, runnable decoder: GQA by Unsqueeze/Expand/Reshape of K and V, q and k each
scaled by head_dim^-0.25 (as the fixture's SDPA export), MatMul/Softmax attention with a causal
mask built from Range, o_proj, residuals, SwiGLU MLP, final RMSNorm, lm_head. No KV cache
(use_cache=False like the fixtures): "decode" is a run with S=1. Every intermediate tensor gets a
value_info with symbolic dims `batch` / `sequence`.

    .venv/bin/python bench/fuse/make_synthetic_qwen3.py --out /tmp/ropekit_bench/qwen3_full
    [--layers 28] [--vocab 32000] [--seed 0] [--check]

Writes OUT/model.onnx, OUT/model.onnx.data and OUT/config.json (max_position_embeddings 40960,
as Qwen3-0.6B, read by `ropekit fuse` for the table length). --check loads the model in
onnxruntime and runs one (1, 8) forward pass.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B, S = "batch", "sequence"


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.vi = [], [], []
        self._n = 0

    def name(self, base):
        self._n += 1
        return f"{base}_{self._n}"

    def init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def const_i64(self, name, vals, scalar=False):
        a = np.array(vals, np.int64)
        return self.init(name, a.reshape(()) if scalar else a.reshape(-1))

    def op(self, op_type, inputs, shape, dtype=F, out=None, **attrs):
        out = out or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name("n_" + op_type), **attrs))
        if shape is not None:
            self.vi.append(helper.make_tensor_value_info(out, dtype, shape))
        return out


def build(layers, vocab, hidden=1024, nq=16, nkv=8, hd=128, inter=3072, theta=1e6, seed=0):
    rng = np.random.default_rng(seed)
    b = Builder()

    def w(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    def norm_w(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    # constants (fixture names where they exist)
    c0 = b.const_i64("val_6", [0])
    c1 = b.const_i64("val_10", [1])
    cm1 = b.const_i64("val_24", [-1])
    c2 = b.const_i64("val_50", [2])
    c3 = b.const_i64("val_143", [3])
    chalf = b.const_i64("val_139", [hd // 2])
    cmax = b.const_i64("val_151", [np.iinfo(np.int64).max])
    chd = b.const_i64("val_109", [hd])
    cgroups = b.const_i64("c_groups", [nq // nkv])
    cnq = b.const_i64("c_nq", [nq])
    s0 = b.const_i64("val_42", 0, scalar=True)
    s1 = b.const_i64("val_44", 1, scalar=True)
    cnkv = b.const_i64("c_nkv", [nkv])
    two = b.init("val_99", np.array(2.0, np.float32))
    eps = b.init("val_102", np.array(1e-6, np.float32))
    qk_scale = b.init("val_217", np.array(hd ** -0.25, np.float32))
    zero_f = b.init("val_221", np.array(0.0, np.float32))
    neg_big = b.init("val_222", np.array(np.finfo(np.float32).min, np.float32))
    inv_freq = (1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.int64).astype(np.float32) / hd))).astype(np.float32)
    b.init("inner.model.rotary_emb.inv_freq", inv_freq)

    # dims
    batch_1d = b.op("Shape", ["position_ids"], [1], I64, out="val_1", start=0, end=1)
    seq_1d = b.op("Shape", ["input_ids"], [1], I64, out="val_0", start=1, end=2)
    seq_sc = b.op("Squeeze", [seq_1d], [], I64, out="sym_size_int_6")
    shape_bsnh = b.op("Concat", [batch_1d, seq_1d, cm1, chd], [4], I64, out="val_110", axis=0)
    shape_bsh = b.op("Concat", [batch_1d, seq_1d, cm1], [3], I64, out="val_239", axis=0)
    shape_exp = b.op("Concat", [batch_1d, cnkv, cgroups, seq_1d, chd], [5], I64, out="val_182", axis=0)
    shape_gqa = b.op("Concat", [batch_1d, cnq, seq_1d, chd], [4], I64, out="val_188", axis=0)

    # causal mask (S, S): 0 where key <= query, float32 min elsewhere
    ar = b.op("Range", [s0, seq_sc, s1], [S], I64, out="arange")
    ar_k = b.op("Unsqueeze", [ar, b.const_i64("c_ax0", [0])], [1, S], I64)
    ar_q = b.op("Unsqueeze", [ar, c1], [S, 1], I64)
    allowed = b.op("LessOrEqual", [ar_k, ar_q], [S, S], TensorProto.BOOL)
    mask = b.op("Where", [allowed, zero_f, neg_big], [S, S], out="val_223")

    # embedding
    emb = b.init("inner.model.embed_tokens.weight", w(vocab, hidden))
    h = b.op("Gather", [emb, "input_ids"], [B, S, hidden], out="embedding", axis=0)

    # RoPE angles, exactly as the dynamo fixture
    pu = b.op("Unsqueeze", ["position_ids", c2], [B, S, 1], I64, out="unsqueeze_12")
    pf = b.op("Cast", [pu], [B, S, 1], out="_to_copy", to=F)
    fr = b.op("Mul", [pf, "inner.model.rotary_emb.inv_freq"], [B, S, hd // 2], out="mul")
    cat = b.op("Concat", [fr, fr], [B, S, hd], out="cat_1", axis=-1)
    cos = b.op("Cos", [cat], [B, S, hd], out="cos")
    sin = b.op("Sin", [cat], [B, S, hd], out="sin")
    cos_u = b.op("Unsqueeze", [cos, c1], [B, 1, S, hd], out="unsqueeze_13")
    sin_u = b.op("Unsqueeze", [sin, c1], [B, 1, S, hd], out="unsqueeze_14")

    def rmsnorm(x, weight, shape):
        p = b.op("Pow", [x, two], shape)
        m = b.op("ReduceMean", [p, cm1], shape[:-1] + [1], keepdims=1, noop_with_empty_axes=0)
        a = b.op("Add", [m, eps], shape[:-1] + [1])
        sq = b.op("Sqrt", [a], shape[:-1] + [1])
        r = b.op("Reciprocal", [sq], shape[:-1] + [1])
        y = b.op("Mul", [x, r], shape)
        return b.op("Mul", [weight, y], shape)

    def rope(x, n):  # x: (B, n, S, hd)
        shp = [B, n, S, hd]
        m1 = b.op("Mul", [x, cos_u], shp)
        lo = b.op("Slice", [x, c0, chalf, c3, c1], [B, n, S, hd // 2])
        hi = b.op("Slice", [x, chalf, cmax, c3, c1], [B, n, S, hd // 2])
        ng = b.op("Neg", [hi], [B, n, S, hd // 2])
        rh = b.op("Concat", [ng, lo], shp, axis=-1)
        m2 = b.op("Mul", [rh, sin_u], shp)
        return b.op("Add", [m1, m2], shp)

    def heads(x_in, wname, n, norm):  # MatMul -> Reshape -> [RMSNorm] -> Transpose
        lin = b.op("MatMul", [x_in, wname], [B, S, n * hd])
        v = b.op("Reshape", [lin, shape_bsnh], [B, S, n, hd], allowzero=1)
        if norm is not None:
            v = rmsnorm(v, norm, [B, S, n, hd])
        return b.op("Transpose", [v], [B, n, S, hd], perm=[0, 2, 1, 3])

    def repeat_kv(x):  # (B, nkv, S, hd) -> (B, nq, S, hd)
        u = b.op("Unsqueeze", [x, c2], [B, nkv, 1, S, hd])
        e = b.op("Expand", [u, shape_exp], [B, nkv, nq // nkv, S, hd])
        return b.op("Reshape", [e, shape_gqa], [B, nq, S, hd], allowzero=1)

    for L in range(layers):
        p = f"inner.model.layers.{L}."
        ln1 = b.init(p + "input_layernorm.weight", norm_w(hidden))
        ln2 = b.init(p + "post_attention_layernorm.weight", norm_w(hidden))
        qn = b.init(p + "self_attn.q_norm.weight", norm_w(hd))
        kn = b.init(p + "self_attn.k_norm.weight", norm_w(hd))
        wq = b.init(p + "self_attn.q_proj.weight_t", w(hidden, nq * hd))
        wk = b.init(p + "self_attn.k_proj.weight_t", w(hidden, nkv * hd))
        wv = b.init(p + "self_attn.v_proj.weight_t", w(hidden, nkv * hd))
        wo = b.init(p + "self_attn.o_proj.weight_t", w(nq * hd, hidden))
        wg = b.init(p + "mlp.gate_proj.weight_t", w(hidden, inter))
        wu = b.init(p + "mlp.up_proj.weight_t", w(hidden, inter))
        wd = b.init(p + "mlp.down_proj.weight_t", w(inter, hidden))

        x = rmsnorm(h, ln1, [B, S, hidden])
        q = rope(heads(x, wq, nq, qn), nq)
        k = rope(heads(x, wk, nkv, kn), nkv)
        v = heads(x, wv, nkv, None)
        k, v = repeat_kv(k), repeat_kv(v)
        qs = b.op("Mul", [q, qk_scale], [B, nq, S, hd])
        ks = b.op("Mul", [k, qk_scale], [B, nq, S, hd])
        kt = b.op("Transpose", [ks], [B, nq, hd, S], perm=[0, 1, 3, 2])
        sc = b.op("MatMul", [qs, kt], [B, nq, S, S])
        sc = b.op("Add", [sc, mask], [B, nq, S, S])
        pr = b.op("Softmax", [sc], [B, nq, S, S], axis=-1)
        at = b.op("MatMul", [pr, v], [B, nq, S, hd])
        at = b.op("Transpose", [at], [B, S, nq, hd], perm=[0, 2, 1, 3])
        at = b.op("Reshape", [at, shape_bsh], [B, S, nq * hd], allowzero=1)
        o = b.op("MatMul", [at, wo], [B, S, hidden])
        h = b.op("Add", [h, o], [B, S, hidden])

        x = rmsnorm(h, ln2, [B, S, hidden])
        g = b.op("MatMul", [x, wg], [B, S, inter])
        sg = b.op("Sigmoid", [g], [B, S, inter])
        g = b.op("Mul", [g, sg], [B, S, inter])
        u = b.op("MatMul", [x, wu], [B, S, inter])
        m = b.op("Mul", [g, u], [B, S, inter])
        d = b.op("MatMul", [m, wd], [B, S, hidden])
        h = b.op("Add", [h, d], [B, S, hidden])

    h = rmsnorm(h, b.init("inner.model.norm.weight", norm_w(hidden)), [B, S, hidden])
    lm = b.init("lm_head.weight_t", w(hidden, vocab))
    b.nodes.append(helper.make_node("MatMul", [h, lm], ["logits"], name="n_lm_head"))

    graph = helper.make_graph(
        b.nodes, "main_graph",
        [helper.make_tensor_value_info("input_ids", I64, [B, S]),
         helper.make_tensor_value_info("position_ids", I64, [B, S])],
        [helper.make_tensor_value_info("logits", F, [B, S, vocab])],
        initializer=b.inits, value_info=b.vi)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                              producer_name="ropekit bench/fuse/make_synthetic_qwen3.py")
    model.ir_version = 10
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/ropekit_bench/qwen3_full")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build(a.layers, a.vocab, seed=a.seed)
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    path = out / "model.onnx"
    for f in (path, out / "model.onnx.data"):
        if f.exists():
            f.unlink()
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=1024)
    (out / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
        "num_hidden_layers": a.layers, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "vocab_size": a.vocab, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "max_position_embeddings": 40960, "torch_dtype": "float32",
        "note": "synthetic, random weights, built by ropekit bench/fuse/make_synthetic_qwen3.py"},
        indent=2) + "\n")
    onnx.checker.check_model(str(path), full_check=False)
    print(f"wrote {path} ({path.stat().st_size} B) + model.onnx.data "
          f"({(out / 'model.onnx.data').stat().st_size} B): {len(model.graph.node)} nodes, "
          f"{n_params} parameters, {time.perf_counter() - t0:.1f} s")
    if a.check:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(1)
        y = sess.run(None, {"input_ids": rng.integers(0, a.vocab, (1, 8)).astype(np.int64),
                            "position_ids": np.arange(8, dtype=np.int64)[None]})[0]
        print(f"onnxruntime ok: logits {y.shape}, max |y| {np.abs(y).max():.4g}, finite {np.isfinite(y).all()}")


if __name__ == "__main__":
    main()
