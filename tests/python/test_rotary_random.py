"""Randomized conformance of rotary_embedding (ai.onnx), ms_rotary_embedding (com.microsoft) and
mrotary_embedding (com.microsoft.MRotaryEmbedding) against
  a) the float64 oracle in oracle.py (same T-rounded inputs), in ulps of T at the oracle value;
  b) onnx's reference implementation (ai.onnx, float32/float16);
  c) onnxruntime CPU (float32/float16; ORT 1.32 registers all three ops on CPU for float and
     float16, none for bfloat16, so bfloat16 is checked against the oracle only).
b) and c) round each product separately (per-op rounding, FMA on one product), so their error is
measured in ulps at the scale of the larger of the two products ("term ulps").
inverse=1 is a ropekit extension: the references get -sin instead (negation is exact). ORT
ignores com.microsoft.RotaryEmbedding's scale, so ORT gets tables already scaled as the contract
says (float multiply, rounded to the table type); ORT's MRotaryEmbedding applies scale itself
and gets the raw tables and the attribute."""

import numpy as np
import pytest
from onnx.reference.ops.op_rotary_embedding import rotary_embedding as onnx_reference

import cases as C
import oracle as O
import ropekit

N_CASES = 2000
OPS = {
    "onnx": (C.onnx_case, ropekit.rotary_embedding, O.onnx_rope),
    "ms": (C.ms_case, ropekit.ms_rotary_embedding, O.ms_rope),
    "mrope": (C.mrope_case, ropekit.mrotary_embedding, O.mrope),
}
ORACLE_TOL = {"float32": 0.5 + 1e-6, "float16": 1.0, "bfloat16": 1.0}
REF_TOL = 2.0 + 1e-6  # two product roundings + one sum rounding, in term ulps
SEED = {"onnx": 1, "ms": 2, "mrope": 3}
DT_SEED = {"float32": 10, "float16": 20, "bfloat16": 30}


def run(op, case, out=None):
    return OPS[op][1](*case["args"], **case["attrs"], out=out)


def expected(op, case):
    return OPS[op][2](*case["args"], **case["attrs"])


def ort_output(op, case):
    a = case["attrs"]
    x = case["args"][0]
    oa = {"interleaved": a["interleaved"], "num_heads": x.shape[1] if x.ndim == 4 else a["num_heads"]}
    if a["rotary_embedding_dim"]:
        oa["rotary_embedding_dim"] = a["rotary_embedding_dim"]
    if op == "onnx":
        x, cos, sin, pos = case["args"]
        ins = [("X", x), ("cos", cos), ("sin", -sin if a["inverse"] else sin)]
        if pos is not None:
            ins.append(("pos", pos))
        return O.ort_run("RotaryEmbedding", "", ins, oa)
    x, pos, cos, sin = case["args"]
    if op == "ms":  # ORT parses scale and ignores it: give it the scaled tables
        cos, sin = O._scaled_table(cos, a["scale"]), O._scaled_table(sin, a["scale"])
        ins = [("input", x), ("pos", pos), ("cos", cos), ("sin", -sin if a["inverse"] else sin)]
        return O.ort_run("RotaryEmbedding", "com.microsoft", ins, oa)
    # ORT's MRotaryEmbedding applies scale itself
    ins = [("input", x), ("pos", pos), ("cos", cos), ("sin", -sin if a["inverse"] else sin)]
    oa.update(mrope_section=list(a["mrope_section"]), mrope_layout=a["mrope_layout"], scale=a["scale"])
    return O.ort_run("MRotaryEmbedding", "com.microsoft", ins, oa)


def reference_output(case):
    x, cos, sin, pos = case["args"]
    a = case["attrs"]
    return onnx_reference(x, cos, -sin if a["inverse"] else sin, position_ids=pos, interleaved=a["interleaved"],
                          rotary_embedding_dim=a["rotary_embedding_dim"], num_heads=a["num_heads"])


def describe(case):
    return {"x": case["args"][0].shape, **case["attrs"]}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", list(OPS))
def test_random(op, dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng([SEED[op], DT_SEED[dtype]])
    fails = []
    worst, counts = {}, {}
    for i in range(N_CASES):
        case = OPS[op][0](rng, dt)
        y = run(op, case)
        assert y.dtype == dt and y.shape == case["args"][0].shape
        ref, mag = expected(op, case)
        checks = [("float64 oracle (ulp)", O.ulp_err(y, ref, dt).max(), ORACLE_TOL[dtype])]
        tab = case["args"][1] if op == "onnx" else case["args"][2]
        seq = y.shape[2] if y.ndim == 4 else y.shape[1]
        if dtype != "bfloat16" and (tab.ndim == 3 or tab.shape[0] >= seq):  # ORT rejects S > P
            checks.append(("onnxruntime CPU (term ulp)", O.ulp_err(ort_output(op, case), ref, dt, mag).max(), REF_TOL))
        if dtype != "bfloat16" and op == "onnx":
            checks.append(("onnx reference (term ulp)",
                           O.ulp_err(reference_output(case), ref, dt, mag).max(), REF_TOL))
        for name, err, tol in checks:
            counts[name] = counts.get(name, 0) + 1
            worst[name] = max(worst.get(name, 0.0), err)
            if not err <= tol:
                fails.append((i, name, float(err), describe(case)))
    for name, err in worst.items():
        O.report((op, dtype, name), err)
        print(f"{op} {dtype}: max error vs {name} = {err:.4g} over {counts[name]} cases")
        O.report((op, dtype, name, "cases compared"), counts[name])
    assert not fails, f"{len(fails)} failing checks, first: {fails[:5]}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", list(OPS))
def test_float32_tables(op, dtype):
    """ropekit extension: float32 tables with 16-bit x (W = double, then float, then T)."""
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng([SEED[op], DT_SEED[dtype], 7])
    worst = 0.0
    for i in range(500):
        case = OPS[op][0](rng, dt, O.F32)
        y = run(op, case)
        err = O.ulp_err(y, expected(op, case)[0], dt).max()
        worst = max(worst, err)
        assert err <= 1.0, (i, err, describe(case))
    O.report((op, dtype, "float32 tables: float64 oracle (ulp)"), worst)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", list(OPS))
def test_inplace_equals_out_of_place(op, dtype):
    rng = np.random.default_rng([SEED[op], DT_SEED[dtype], 3])
    for i in range(150):
        case = OPS[op][0](rng, O.DTYPES[dtype])
        x = case["args"][0]
        x_before = x.copy()
        y = run(op, case)
        assert np.array_equal(bits(x), bits(x_before)), "out-of-place call wrote its input"
        r = run(op, case, out=x)
        assert r is x
        assert np.array_equal(bits(x), bits(y)), (i, describe(case))


def _strided(op, case, rng):
    """The same case with every operand a non-contiguous view of a bigger buffer."""
    args = list(case["args"])
    x = args[0]
    if x.ndim == 3:  # x = the K part of a packed (B, S, Q|K|V) buffer
        B, S, D = x.shape
        qkv = O.rand_vals(rng, (B, S, 3 * D), x.dtype)
        qkv[:, :, D:2 * D] = x
        args[0] = qkv[:, :, D:2 * D]
    else:  # (B, N, S, H) view of a (B, S, 3, N, H) buffer
        B, N, S, H = x.shape
        qkv = O.rand_vals(rng, (B, S, 3, N, H), x.dtype)
        qkv[:, :, 1] = x.transpose(0, 2, 1, 3)
        args[0] = qkv[:, :, 1].transpose(0, 2, 1, 3)
    assert np.shares_memory(args[0], qkv) and args[0].size < qkv.size

    def loose(a):  # a non-contiguous copy
        if a is None:
            return None
        if a.ndim == 2:  # transposed table / position ids: column-major storage
            return np.asfortranarray(a)
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]

    for k in range(1, len(args)):
        if args[k] is not None and args[k].ndim >= 2:
            args[k] = loose(args[k])
        elif args[k] is not None:  # (1,) offset: a strided 1-element view
            args[k] = np.repeat(args[k], 3)[::3]
    return {"args": tuple(args), "attrs": case["attrs"]}, qkv


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", list(OPS))
def test_strided_views_equal_contiguous(op, dtype):
    rng = np.random.default_rng([SEED[op], DT_SEED[dtype], 4])
    for i in range(150):
        case = OPS[op][0](rng, O.DTYPES[dtype])
        y = run(op, case)
        sc, qkv = _strided(op, case, rng)
        qkv_before = qkv.copy()
        ys = run(op, sc)
        assert np.array_equal(bits(ys), bits(y)), (i, describe(case))
        # strided output: a view into a bigger buffer, rest untouched
        big = np.full(ys.shape[:-1] + (ys.shape[-1] + 3,), 7, ys.dtype)
        out = big[..., 2:2 + ys.shape[-1]]
        run(op, sc, out=out)
        assert np.array_equal(bits(out), bits(y))
        assert (big[..., :2].astype(np.float32) == 7).all() and (big[..., -1].astype(np.float32) == 7).all()
        # in place on the packed buffer: only the K slice changes
        run(op, sc, out=sc["args"][0])
        assert np.array_equal(bits(sc["args"][0]), bits(y))
        if qkv.ndim == 3:
            D = qkv.shape[2] // 3
            untouched = np.concatenate([qkv[..., :D], qkv[..., 2 * D:]], -1), np.concatenate(
                [qkv_before[..., :D], qkv_before[..., 2 * D:]], -1)
        else:
            untouched = qkv[:, :, [0, 2]], qkv_before[:, :, [0, 2]]
        assert np.array_equal(bits(untouched[0]), bits(untouched[1]))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", list(OPS))
def test_rank3_equals_rank4(op, dtype):
    rng = np.random.default_rng([SEED[op], DT_SEED[dtype], 5])
    for i in range(150):
        case = OPS[op][0](rng, O.DTYPES[dtype])
        x = case["args"][0]
        a = dict(case["attrs"])
        if x.ndim == 3:
            N = a["num_heads"]
            B, S, D = x.shape
            x4 = np.ascontiguousarray(x.reshape(B, S, N, D // N).transpose(0, 2, 1, 3))
            x3 = x
        else:
            B, N, S, H = x.shape
            x4, x3 = x, np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, S, N * H)
        y3 = run(op, {"args": (x3,) + case["args"][1:], "attrs": {**a, "num_heads": N}})
        y4 = run(op, {"args": (x4,) + case["args"][1:], "attrs": {**a, "num_heads": 0}})
        y4n = run(op, {"args": (x4,) + case["args"][1:], "attrs": {**a, "num_heads": N}})
        assert np.array_equal(bits(y4), bits(y4n))
        y4as3 = np.ascontiguousarray(y4.transpose(0, 2, 1, 3)).reshape(B, S, -1)
        assert np.array_equal(bits(y3), bits(y4as3)), (i, describe(case))
