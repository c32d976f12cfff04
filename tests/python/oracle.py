"""Independent oracles for the ropekit conformance suite.

Everything here is written from the contract text (include/ropekit.h, shared/spec/operators.md),
not from the C sources: float64 transcriptions of the operators, ulp helpers, random case
generators and a small onnxruntime wrapper. Nothing here calls ropekit.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import ml_dtypes
import numpy as np

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": F32, "float16": F16, "bfloat16": BF16}
# (fraction bits, exponent of the smallest normal)
_FMT = {F32: (23, -126), F16: (10, -14), BF16: (7, -126)}

# Max errors measured by the tests, printed by conftest.pytest_terminal_summary.
REPORT: dict[tuple, float] = {}


def report(key: tuple, value: float) -> None:
    value = float(value)
    REPORT[key] = max(REPORT.get(key, 0.0), value)


# ---- ulps and rounding -------------------------------------------------------------------------


def ulp(v, dt) -> np.ndarray:
    """ulp of the format dt at |v| (float64), floored at the ulp of the smallest normal."""
    mant, emin = _FMT[np.dtype(dt)]
    a = np.abs(np.asarray(v, np.float64))
    _, e = np.frexp(a)  # a = m * 2**e, m in [0.5, 1)
    e = np.maximum(e - 1, emin)
    return np.ldexp(1.0, (e - mant).astype(np.int64))


def ulp_err(got, ref, dt, scale=None) -> np.ndarray:
    """|got - ref| in ulps of dt, measured at |ref| (or at max(|ref|, scale) when given)."""
    g = to64(got)
    r = np.asarray(ref, np.float64)
    at = np.abs(r) if scale is None else np.maximum(np.abs(r), scale)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - r) / ulp(at, dt)
    return np.where(np.isnan(err), np.inf, err)


def to64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def round_once(v, dt) -> np.ndarray:
    """Round float64 values once (nearest, ties to even) to dt. (ml_dtypes' float64 -> bfloat16
    goes through float32, i.e. rounds twice, so this does it by hand.)"""
    v = np.asarray(v, np.float64)
    u = ulp(v, dt)
    return (np.rint(v / u) * u).astype(dt)


def rt(v32, dt) -> np.ndarray:
    """Rt(v): round float32 values to dt and back to float32."""
    return np.asarray(v32, np.float32).astype(dt).astype(np.float32)


# ---- layouts ---------------------------------------------------------------------------------


def to_bsnh(x, num_heads):
    """(B, S, N*H) with num_heads, or (B, N, S, H) -> (B, S, N, H) view."""
    if x.ndim == 3:
        b, s, hid = x.shape
        return x.reshape(b, s, num_heads, hid // num_heads)
    return x.transpose(0, 2, 1, 3)


def from_bsnh(y, like_shape):
    if len(like_shape) == 3:
        return y.reshape(like_shape)
    return y.transpose(0, 2, 1, 3)


# ---- the rotation (section 0 / Notation) -----------------------------------------------------


def rotate(x, c, s, R, interleaved, inverse):
    """x float64 (B, S, N, H); c, s float64 (B, S, R/2) rows per token.
    Returns (y, mag): the exact-products rotation in float64 (one rounding of the sum) and, per
    output element, the largest magnitude of the two terms (|x| for copied channels)."""
    h = R // 2
    c = c[:, :, None, :]
    s = -s[:, :, None, :] if inverse else s[:, :, None, :]
    i1 = np.arange(h) * 2 if interleaved else np.arange(h)
    i2 = i1 + 1 if interleaved else i1 + h
    a, b = x[..., i1], x[..., i2]
    y = x.copy()
    mag = np.abs(x)
    y[..., i1] = c * a - s * b
    y[..., i2] = s * a + c * b
    mag[..., i1] = np.maximum(np.abs(c * a), np.abs(s * b))
    mag[..., i2] = np.maximum(np.abs(s * a), np.abs(c * b))
    return y, mag


def _scaled_table(t, scale):
    """'cos and sin are multiplied by scale in float and rounded to the table type'."""
    return (t.astype(np.float32) * np.float32(scale)).astype(t.dtype)


def onnx_rope(x, cos, sin, pos=None, *, interleaved=0, rotary_embedding_dim=0, num_heads=0, inverse=0):
    """ai.onnx.RotaryEmbedding in float64 (inputs taken as their exact values)."""
    xb = to_bsnh(to64(x), num_heads)
    R = rotary_embedding_dim or xb.shape[-1]
    c, s = to64(cos), to64(sin)
    if pos is not None:
        c, s = c[pos], s[pos]
    y, mag = rotate(xb, c, s, R, interleaved, inverse)
    return from_bsnh(y, x.shape), from_bsnh(mag, x.shape)


def ms_rope(x, pos, cos, sin, *, interleaved=0, rotary_embedding_dim=0, num_heads=0, scale=1.0, inverse=0):
    """com.microsoft.RotaryEmbedding in float64 (scale applied to the tables first)."""
    xb = to_bsnh(to64(x), num_heads)
    B, S = xb.shape[:2]
    R = rotary_embedding_dim or xb.shape[-1]
    c, s = to64(_scaled_table(cos, scale)), to64(_scaled_table(sin, scale))
    pos = np.asarray(pos)
    rows = np.broadcast_to(pos[0] + np.arange(S), (B, S)) if pos.shape == (1,) else pos
    y, mag = rotate(xb, c[rows], s[rows], R, interleaved, inverse)
    return from_bsnh(y, x.shape), from_bsnh(mag, x.shape)


def mrope_streams(h, section, layout):
    """Stream (0 T, 1 H, 2 W) read by each of the h table columns."""
    if layout == 0:
        return np.array([0] * section[0] + [1] * section[1] + [2] * section[2], np.int64)
    a = np.zeros(h, np.int64)
    for k in range(h):
        if k % 3 == 1 and k < 3 * section[1]:
            a[k] = 1
        elif k % 3 == 2 and k < 3 * section[2]:
            a[k] = 2
    return a


def mrope(x, pos3, cos, sin, *, mrope_section, mrope_layout=0, interleaved=0, rotary_embedding_dim=0,
          num_heads=0, scale=1.0, inverse=0):
    """com.microsoft.MRotaryEmbedding in float64."""
    xb = to_bsnh(to64(x), num_heads)
    R = rotary_embedding_dim or xb.shape[-1]
    h = R // 2
    a = mrope_streams(h, list(mrope_section), mrope_layout)
    c, s = to64(_scaled_table(cos, scale)), to64(_scaled_table(sin, scale))
    cols = np.arange(h)
    rows = np.asarray(pos3)[a[None, None, :], np.arange(xb.shape[0])[:, None, None],
                            np.arange(xb.shape[1])[None, :, None]]  # (B, S, h)
    y, mag = rotate(xb, c[rows, cols], s[rows, cols], R, interleaved, inverse)
    return from_bsnh(y, x.shape), from_bsnh(mag, x.shape)


# ---- QKNormRotaryEmbedding / InverseRotaryRegroup (section 3.4 / 3.5) -------------------------


def sum_squares(v):
    """Squares in double, 16 lanes (lane j: channels j, j+16, ... in order), then the lanes
    j+8, j+4, j+2, j+1 folded in; rounded to float. v: (..., D) float32."""
    d = v.shape[-1]
    k = -(-d // 16)
    sq = np.zeros(v.shape[:-1] + (k * 16,), np.float64)
    sq[..., :d] = v.astype(np.float64) ** 2
    sq = sq.reshape(v.shape[:-1] + (k, 16))
    lanes = np.zeros(v.shape[:-1] + (16,), np.float64)
    for i in range(k):
        lanes = lanes + sq[..., i, :]
    for w in (8, 4, 2, 1):
        lanes = lanes[..., :w] + lanes[..., w:2 * w]
    return lanes[..., 0].astype(np.float32)


def _rsqrt(ss, head_dim, eps):
    return np.float32(1) / np.sqrt(ss / np.float32(head_dim) + np.float32(eps))


def _rotate_tail(x32, cos, sin, nope, inverse):
    """x32 (..., D) float32 rounded values; cos, sin (..., rope) float32 broadcastable.
    Returns the float64 results for the tail channels (one rounding of the sum in double)."""
    t = x32[..., nope:].astype(np.float64)
    r = t.shape[-1]
    idx = np.arange(r)
    odd = idx % 2 == 1
    partner = np.where(odd, idx - 1, np.minimum(idx + 1, r - 1))
    sign = np.where(odd, 1.0, -1.0)
    if inverse:
        sign = -sign
    return t * cos.astype(np.float64) + (sign * t[..., partner]) * sin.astype(np.float64)


_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.logf.restype = ctypes.c_float
_libm.logf.argtypes = [ctypes.c_float]


def e4m3(v32):
    """Round float32 values (already clamped to [-448, 448]) to the FP8-E4M3FN grid, nearest,
    ties to even: exponent floor -6, 3 fraction bits, subnormal step 2**-9."""
    v = np.asarray(v32, np.float64)
    _, e = np.frexp(np.abs(v))
    step = np.ldexp(1.0, (np.maximum(e - 1, -6) - 3).astype(np.int64))
    return (np.rint(v / step) * step).astype(np.float32)


def fp8_block(k32, flip=False):
    """FP8 round trip of one block of float32 values (already rounded to T), returned in float32
    before the final Rt. Also returns whether the block is ambiguous: ratio within 2**-18 of a
    power of two, where logf(ratio)/0.69314718f may land either side of the integer (the
    contract allows such flips); flip=True takes the other binade there."""
    amax = np.float32(np.max(np.abs(k32)))
    ratio = max(np.float32(amax / np.float32(448)), np.float32(1e-30))
    if amax > 0:
        q = np.float32(_libm.logf(float(ratio))) / np.float32(0.69314718)
        e = int(np.ceil(q))
        l2 = np.log2(np.float64(ratio))
        ambiguous = abs(l2 - np.rint(l2)) < 2.0**-18
        if ambiguous and flip:
            e = int(np.rint(l2)) + (1 if e == int(np.rint(l2)) else 0)
        scale = np.float32(np.ldexp(1.0, e))
    else:
        scale, ambiguous = np.float32(1), False
    q = np.clip(k32 / scale, np.float32(-448), np.float32(448)).astype(np.float32)
    return (e4m3(q) * scale).astype(np.float32), ambiguous


def qknorm(query, kv, w, cos, sin, *, num_heads, head_dim, rope_head_dim=0, epsilon=1e-6, simulate_fp8=1,
           flip_ambiguous=False):
    """QKNormRotaryEmbedding transcribed from the contract. Returns (query_out, kv_out) as T,
    plus the query normalized but not rotated (float32), plus a mask of kv elements whose fp8
    block is ambiguous."""
    T = query.dtype
    B, S = query.shape[:2]
    nope = head_dim - rope_head_dim
    q = query.astype(np.float32).reshape(B, S, num_heads, head_dim)
    r = rt(_rsqrt(sum_squares(q), head_dim, epsilon), T)
    qn = rt(q * r[..., None], T)
    k = kv.astype(np.float32)
    rk = _rsqrt(sum_squares(k), head_dim, epsilon)
    kn = rt((k * rk[..., None]) * w.astype(np.float32), T)
    qo, ko = qn.astype(T), kn.astype(T)
    if rope_head_dim:
        c, s = cos.astype(np.float32), sin.astype(np.float32)
        qo[..., nope:] = _rotate_tail(qn, c[:, :, None, :], s[:, :, None, :], nope, 0).astype(np.float32).astype(T)
        ko[..., nope:] = _rotate_tail(kn, c, s, nope, 0).astype(np.float32).astype(T)
    amb = np.zeros(ko.shape, bool)
    if simulate_fp8:
        for b in range(B):
            for si in range(S):
                for j in range(0, nope, 64):
                    blk, a = fp8_block(kn[b, si, j:j + 64], flip_ambiguous)
                    ko[b, si, j:j + 64] = blk.astype(T)
                    amb[b, si, j:j + 64] = a
    return qo, ko, qn, amb


def regroup(x, cos, sin, *, num_heads, head_dim, rope_head_dim=0, num_groups=1):
    """InverseRotaryRegroup transcribed from the contract: (N, nh*hd) -> (G, N, group_dim)."""
    T = x.dtype
    n = x.shape[0]
    nope = head_dim - rope_head_dim
    y = x.reshape(n, num_heads, head_dim).copy()
    if rope_head_dim:
        x32 = y.astype(np.float32)
        tail = _rotate_tail(x32, cos.astype(np.float32)[:, None, :], sin.astype(np.float32)[:, None, :], nope, 1)
        y[..., nope:] = tail.astype(np.float32).astype(T)
    gd = num_heads * head_dim // num_groups
    return y.reshape(n, num_groups, gd).transpose(1, 0, 2).copy()


# ---- random cases ----------------------------------------------------------------------------

H_CHOICES = [2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 16, 17, 20, 24, 31, 32, 33, 40]


def rand_vals(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dt)


def rand_tables(rng, P, h, dt):
    ang = rng.uniform(-np.pi, np.pi, (P, h))
    amp = rng.choice([1.0, 1.0, 1.25, 0.7])
    return (np.cos(ang) * amp).astype(np.float32).astype(dt), (np.sin(ang) * amp).astype(np.float32).astype(dt)


def rand_geometry(rng):
    B, S, N = int(rng.integers(1, 4)), int(rng.integers(1, 8)), int(rng.integers(1, 5))
    H = int(rng.choice(H_CHOICES))
    evens = [r for r in range(2, H + 1, 2)]
    R = H if (H % 2 == 0 and rng.random() < 0.5) else int(rng.choice([r for r in evens if r < H] or [H]))
    return B, S, N, H, R


def rand_x(rng, B, S, N, H, rank, dt):
    scale = 10.0 ** rng.uniform(-3, 2)
    x = rand_vals(rng, (B, S, N, H), dt, scale)
    if rank == 3:
        return x.reshape(B, S, N * H)
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))


# ---- onnxruntime -----------------------------------------------------------------------------

_SESSIONS: dict = {}


def ort_run(op, domain, inputs, attrs, opset=23):
    """Run one node on ORT CPU (graph optimizations off). inputs: list of (name, array);
    sessions are cached per (op, attrs, input dtypes and ranks)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    ort.set_default_logger_severity(3)
    key = (op, domain, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(attrs.items())), tuple((n, a.dtype.str, a.ndim) for n, a in inputs))
    sess = _SESSIONS.get(key)
    if sess is None:
        def vi(n, a):
            return helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                 [f"{n}_{i}" for i in range(a.ndim)])
        node = helper.make_node(op, [n for n, _ in inputs], ["y"], domain=domain, **attrs)
        out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(inputs[0][1].dtype), None)
        graph = helper.make_graph([node], "g", [vi(n, a) for n, a in inputs], [out])
        ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        model = helper.make_model(graph, opset_imports=ops)
        model.ir_version = 10
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        _SESSIONS[key] = sess
    return sess.run(None, dict(inputs))[0]


# ---- rope parameters -> inv_freq, in float64 (operators.md 6, fixtures README formulas) -------


def inv_freq64(rope_type, d, theta, *, max_position_embeddings=0, factor=None, original_max_position_embeddings=None,
               beta_fast=None, beta_slow=None, mscale=None, mscale_all_dim=None, attention_factor=None,
               truncate=True, low_freq_factor=None, high_freq_factor=None, long_factor=None, short_factor=None,
               seq_len=0):
    """(inv_freq float64 (d/2,), attention_factor float64), every step in double."""
    i = np.arange(d // 2, dtype=np.float64)
    base = theta ** (-(2 * i) / d)
    af = 1.0
    if rope_type == "default":
        inv = base
    elif rope_type == "linear":
        inv = base / factor
    elif rope_type == "yarn":
        O = original_max_position_embeddings

        def m(s, k):
            return 1.0 if s <= 1 else 0.1 * k * np.log(s) + 1.0

        if attention_factor:
            af = attention_factor
        elif mscale and mscale_all_dim:
            af = m(factor, mscale) / m(factor, mscale_all_dim)
        else:
            af = m(factor, 1.0)

        def corr(r):
            return d * np.log(O / (2 * np.pi * r)) / (2 * np.log(theta))

        low, high = corr(beta_fast or 32.0), corr(beta_slow or 1.0)
        if truncate:
            low, high = np.floor(low), np.ceil(high)
        low, high = max(low, 0.0), min(high, d - 1.0)
        if low == high:
            high += 0.001
        ramp = np.clip((i - low) / (high - low), 0.0, 1.0)
        inv = (base / factor) * ramp + base * (1.0 - ramp)
    elif rope_type == "longrope":
        O = original_max_position_embeddings
        f = factor if factor else max_position_embeddings / O
        af = attention_factor if attention_factor else (1.0 if f <= 1 else np.sqrt(1 + np.log(f) / np.log(O)))
        ext = np.asarray(long_factor if (seq_len and seq_len > O) else short_factor, np.float64)
        inv = base / ext
    elif rope_type == "llama3":
        O = original_max_position_embeddings
        wl = 2 * np.pi / base
        low_wl, high_wl = O / low_freq_factor, O / high_freq_factor
        s = (O / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
        inv = np.where(wl > low_wl, base / factor, np.where(wl < high_wl, base, (1 - s) * base / factor + s * base))
    else:
        raise ValueError(rope_type)
    return inv, af
