"""Python arguments the binding must refuse or handle itself (issue 13, defect 9 and the Python
half of defect 8): no silent integer wrapping or truncation, every argument error a
ropekit.Error (a ValueError; an ArgumentTypeError, also a TypeError, when the Python type is
wrong), messages that say what is accepted, unaligned numpy arrays handled, outputs untouched."""

import ml_dtypes
import numpy as np
import pytest

import ropekit as rk

f32, f16, bf16, i64 = np.float32, np.float16, ml_dtypes.bfloat16, np.int64
B, N, S, H, P = 2, 2, 3, 8, 10
rng = np.random.default_rng(13)
X4 = rng.standard_normal((B, N, S, H)).astype(f32)
X3 = np.ascontiguousarray(X4.transpose(0, 2, 1, 3).reshape(B, S, N * H))
COS = rng.uniform(-1, 1, (P, H // 2)).astype(f32)
SIN = rng.uniform(-1, 1, (P, H // 2)).astype(f32)
POS = np.array([[0, 1, 2], [3, 4, 5]], i64)
POS3 = np.stack([POS, POS, POS])
ONNX, MS, MR = rk.rotary_embedding, rk.ms_rotary_embedding, rk.mrotary_embedding


def sentinel(shape, dt=f32):
    return np.full(shape, 7, dt)


def raises_error(call, out=None, *, type_error=False, status=None, has=(), lacks=()):
    """call() must raise ropekit.Error (and TypeError when type_error) with the given status and
    message words, leaving `out` (arrays, pre-filled with a sentinel) untouched."""
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
    before = [o.copy() for o in outs]
    with pytest.raises(rk.Error) as e:
        call()
    err = e.value
    assert isinstance(err, ValueError)
    assert isinstance(err, TypeError) == type_error, f"TypeError: {isinstance(err, TypeError)}: {err}"
    assert isinstance(err, rk.ArgumentTypeError) == type_error
    if status:
        assert err.status == "ROPEKIT_ERROR_" + status, str(err)
    for w in has:
        assert w in str(err), f"{w!r} not in {str(err)!r}"
    for w in lacks:
        assert w not in str(err), f"{w!r} in {str(err)!r}"
    for o, b in zip(outs, before):
        assert np.array_equal(o.view(np.uint8), b.view(np.uint8)), "output written on error"
    return err


# ---- integers: never wrapped, never truncated, never parsed from strings --------------------

WRAP = 2**64 + 2  # wrapped to 2 by a C int64 conversion


@pytest.mark.parametrize("kw", ["num_heads", "rotary_embedding_dim", "interleaved", "inverse"])
def test_integer_beyond_int64_is_refused(kw):
    o = sentinel(X3.shape)
    raises_error(lambda: ONNX(X3, COS, SIN, POS, **{"num_heads": N, kw: WRAP}, out=o), o,
                 status="INVALID_ATTRIBUTE", has=[kw, str(WRAP), "int64"])
    o = sentinel(X3.shape)
    raises_error(lambda: MS(X3, POS, COS, SIN, **{"num_heads": N, kw: WRAP}, out=o), o,
                 status="INVALID_ATTRIBUTE", has=[kw, str(WRAP)])


def test_mrope_section_entries_beyond_int64():
    o = sentinel(X4.shape)
    raises_error(lambda: MR(X4, POS3, COS, SIN, mrope_section=[WRAP, 1, 1], out=o), o,
                 status="INVALID_ATTRIBUTE", has=["mrope_section[0]", str(WRAP)])
    raises_error(lambda: MR(X4, POS3, COS, SIN, mrope_section=[2, 1, -(2**64) + 1]),
                 status="INVALID_ATTRIBUTE", has=["mrope_section[2]"])
    raises_error(lambda: MR(X4, POS3, COS, SIN, mrope_section="211"), type_error=True, has=["mrope_section"])
    raises_error(lambda: MR(X4, POS3, COS, SIN, mrope_section=[2, 1.5, 0.5]), type_error=True,
                 has=["mrope_section[1]", "1.5"])


def test_num_heads_2_pow_63_is_not_called_negative():
    err = raises_error(lambda: ONNX(X3, COS, SIN, POS, num_heads=2**63), status="INVALID_ATTRIBUTE",
                       has=["num_heads", str(2**63)])
    assert "negative" not in str(err)


@pytest.mark.parametrize("bad", [2.7, 2.0, np.float64(2.0), "2", b"2", None, 2 + 0j, [2]],
                         ids=["2.7", "2.0", "np.float64", "str", "bytes", "None", "complex", "list"])
def test_non_integer_attributes_are_type_errors(bad):
    o = sentinel(X3.shape)
    raises_error(lambda: ONNX(X3, COS, SIN, POS, num_heads=bad, out=o), o, type_error=True,
                 status="INVALID_ATTRIBUTE", has=["num_heads", "integer"])
    raises_error(lambda: rk.qknorm_rotary_embedding(X3[:, :, :8], X3[:, :, :8], np.ones(8, f32), num_heads=1,
                                                    head_dim=bad, simulate_fp8=0), type_error=True, has=["head_dim"])
    raises_error(lambda: rk.inverse_rotary_regroup(X3[0], num_heads=N, head_dim=H, num_groups=bad),
                 type_error=True, has=["num_groups"])


def test_bool_counts_refused_bool_flags_accepted():
    raises_error(lambda: ONNX(X3, COS, SIN, POS, num_heads=True), type_error=True, has=["num_heads", "bool"])
    assert np.array_equal(ONNX(X4, COS, SIN, POS, interleaved=True), ONNX(X4, COS, SIN, POS, interleaved=1))
    assert np.array_equal(ONNX(X4, COS, SIN, POS, inverse=np.bool_(True)), ONNX(X4, COS, SIN, POS, inverse=1))


def test_numpy_integers_are_integers():
    ref = ONNX(X3, COS, SIN, POS, num_heads=N)
    for v in (np.int64(N), np.int32(N), np.uint8(N), np.array(N)):
        assert np.array_equal(ONNX(X3, COS, SIN, POS, num_heads=v), ref)
    ref = MR(X4, POS3, COS, SIN, mrope_section=[2, 1, 1])
    assert np.array_equal(MR(X4, POS3, COS, SIN, mrope_section=np.array([2, 1, 1])), ref)
    assert np.array_equal(MR(X4, POS3, COS, SIN, mrope_section=(2, 1, 1)), ref)


def test_float_attributes():
    ref = MS(X4, POS, COS, SIN, scale=0.5)
    assert np.array_equal(MS(X4, POS, COS, SIN, scale=np.float32(0.5)), ref)
    assert np.array_equal(MS(X4, POS, COS, SIN, scale=1), MS(X4, POS, COS, SIN))
    raises_error(lambda: MS(X4, POS, COS, SIN, scale="0.5"), type_error=True, has=["scale"])
    raises_error(lambda: MS(X4, POS, COS, SIN, scale=None), type_error=True, has=["scale"])
    raises_error(lambda: rk.rotary_embedding_on_the_fly(X4, np.ones(4, f32), POS, attention_factor="1"),
                 type_error=True, has=["attention_factor"])


# ---- threads and CPU variants ----------------------------------------------------------------


def test_set_num_threads_does_not_wrap():
    before = rk.get_num_threads()
    try:
        for bad in (2**32 + 2, 2**31, -(2**31) - 1, 2**64 + 2):
            raises_error(lambda: rk.set_num_threads(bad), status="INVALID_ATTRIBUTE", has=[str(bad), "[1, 256]"])
            assert rk.get_num_threads() == before
        for bad in (2.0, "2", None, True):
            raises_error(lambda: rk.set_num_threads(bad), type_error=True)
            assert rk.get_num_threads() == before
        raises_error(lambda: rk.set_num_threads(0), status="INVALID_ATTRIBUTE")
        rk.set_num_threads(np.int64(2))
        assert rk.get_num_threads() == 2
    finally:
        rk.set_num_threads(before)


def test_set_cpu_variant_arguments():
    before = rk.cpu_variant()
    try:
        raises_error(lambda: rk.set_cpu_variant("ref\0x"), status="INVALID_ATTRIBUTE", has=["NUL"])
        assert rk.cpu_variant() == before
        err = raises_error(lambda: rk.set_cpu_variant(None), type_error=True, has=["str", "'ref'", "'auto'"])
        assert "unknown" not in str(err)
        raises_error(lambda: rk.set_cpu_variant(b"ref"), type_error=True)
        raises_error(lambda: rk.set_cpu_variant("nonesuch"), status="INVALID_ATTRIBUTE", has=["nonesuch"])
        assert rk.cpu_variant() == before
        rk.set_cpu_variant("ref")
        assert rk.cpu_variant() == "ref"
    finally:
        rk.set_cpu_variant("auto")


# ---- arrays ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", [np.int64, np.int32, np.float64, np.complex64, np.bool_])
def test_x_dtype_message_lists_what_x_accepts(dt):
    o = sentinel(X4.shape)
    err = raises_error(lambda: ONNX(X4.astype(dt), COS, SIN, POS, out=o), o, type_error=True, status="DTYPE",
                       has=["X", "float32, float16 or bfloat16"])
    assert "int64" not in str(err).replace(f"dtype {np.dtype(dt)}", "")


def test_table_and_ids_dtype_messages():
    raises_error(lambda: MS(X4, POS, COS.astype(np.int64), SIN), type_error=True, status="DTYPE",
                 has=["cos_cache", "float32, float16 or bfloat16"], lacks=["or int64"])
    raises_error(lambda: ONNX(X4, COS, SIN, POS.astype(f32)), type_error=True, status="DTYPE",
                 has=["position_ids", "integer"])


def test_list_inputs():
    err = raises_error(lambda: ONNX(X4.tolist(), COS, SIN, POS), type_error=True, status="DTYPE",
                       has=["X", "list", "numpy array", "float32, float16 or bfloat16"])
    assert "float64" not in str(err)
    raises_error(lambda: ONNX(X4, COS.tolist(), SIN, POS), type_error=True, has=["cos_cache", "list"])
    # position ids may be a list of Python ints; floats in it are refused
    assert np.array_equal(ONNX(X4, COS, SIN, POS.tolist()), ONNX(X4, COS, SIN, POS))
    raises_error(lambda: ONNX(X4, COS, SIN, [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), type_error=True,
                 has=["position_ids", "float64"])
    raises_error(lambda: ONNX(X4, COS, SIN, [[0, 1, 2], [3, 2**64, 5]]), status="POSITION_OUT_OF_RANGE",
                 has=["position_ids[1][1]", str(2**64), "int64"])


def test_uint64_position_id_beyond_int64_is_not_minus_one():
    ids = POS.astype(np.uint64)
    ids[1, 2] = 2**64 - 1
    o = sentinel(X4.shape)
    err = raises_error(lambda: ONNX(X4, COS, SIN, ids, out=o), o, status="POSITION_OUT_OF_RANGE",
                       has=["position_ids[1][2]", str(2**64 - 1)])
    assert "-1" not in str(err)
    ids3 = POS3.astype(np.uint64)
    ids3[2, 0, 1] = 2**63
    raises_error(lambda: MR(X4, ids3, COS, SIN, mrope_section=[2, 1, 1]), status="POSITION_OUT_OF_RANGE",
                 has=["position_ids[2][0][1]", str(2**63)])
    # uint64 ids within range work, the same as int64
    assert np.array_equal(ONNX(X4, COS, SIN, POS.astype(np.uint64)), ONNX(X4, COS, SIN, POS))


def test_read_only_out_is_a_ropekit_error():
    o = sentinel(X4.shape)
    o.flags.writeable = False
    raises_error(lambda: ONNX(X4, COS, SIN, POS, out=o), o, status="UNSUPPORTED", has=["out", "read-only"])
    qo, ko = sentinel((1, 1, 2, 64)), sentinel((1, 1, 64))
    ko.flags.writeable = False
    q, kv = rng.standard_normal((1, 1, 128)).astype(f32), rng.standard_normal((1, 1, 64)).astype(f32)
    raises_error(lambda: rk.qknorm_rotary_embedding(q, kv, np.ones(64, f32), num_heads=2, head_dim=64,
                                                    out=(qo, ko)), (qo, ko), status="UNSUPPORTED", has=["out[1]"])
    raises_error(lambda: ONNX(X4, COS, SIN, POS, out=[0.0] * 96), type_error=True, has=["out", "numpy array"])
    raises_error(lambda: rk.qknorm_rotary_embedding(q, kv, np.ones(64, f32), num_heads=2, head_dim=64, out=qo),
                 type_error=True, has=["pair"])


def unaligned(a):
    """A copy of a whose data starts one byte past an aligned address (numpy flags.aligned False)."""
    buf = np.zeros(a.nbytes + 1, np.uint8)
    u = buf[1:].view(a.dtype).reshape(a.shape)
    u[...] = a
    assert not u.flags.aligned
    return u


@pytest.mark.parametrize("dt", [f32, f16, bf16], ids=["float32", "float16", "bfloat16"])
def test_unaligned_inputs_are_copied(dt):
    x, c, s = X4.astype(dt), COS.astype(dt), SIN.astype(dt)
    ref = ONNX(x, c, s, POS)
    assert np.array_equal(ONNX(unaligned(x), unaligned(c), unaligned(s), unaligned(POS)).view(np.uint8),
                          ref.view(np.uint8))
    ref = MS(x, POS, c, s)
    assert np.array_equal(MS(unaligned(x), unaligned(POS), c, s).view(np.uint8), ref.view(np.uint8))
    inv = np.array([1.0, 0.1, 0.01, 0.001], f32)
    ref = rk.rotary_embedding_on_the_fly(x, inv, POS)
    assert np.array_equal(rk.rotary_embedding_on_the_fly(x, unaligned(inv), unaligned(POS)).view(np.uint8),
                          ref.view(np.uint8))
    tc, ts = rk.rope_cos_sin_table(inv, 5, dtype=dt)
    uc, us = rk.rope_cos_sin_table(unaligned(inv), 5, dtype=dt)
    assert np.array_equal(tc.view(np.uint8), uc.view(np.uint8)) and np.array_equal(ts.view(np.uint8), us.view(np.uint8))


def test_unaligned_out_is_refused():
    o = unaligned(sentinel(X4.shape))
    raises_error(lambda: ONNX(X4, COS, SIN, POS, out=o), o, status="UNSUPPORTED", has=["out", "aligned"])
    x = unaligned(X4)
    raises_error(lambda: ONNX(x, COS, SIN, POS, out=x), x, status="UNSUPPORTED", has=["aligned"])  # in place
    assert np.array_equal(x, X4)


def test_empty_arrays_pass_null_data():
    for shape, ids in (((0, N, S, H), POS[:0]), ((B, N, 0, H), POS[:, :0])):
        x = np.zeros(shape, f32)
        assert ONNX(x, COS, SIN, ids).shape == shape
        assert MS(x, ids, COS, SIN).shape == shape
        assert MR(x, np.stack([ids] * 3), COS, SIN, mrope_section=[2, 1, 1]).shape == shape
    cos, sin = rk.rope_cos_sin_table(np.ones(4, f32), 0)
    assert cos.shape == (0, 4) and sin.shape == (0, 4)
    qo, ko = rk.qknorm_rotary_embedding(np.zeros((0, 2, 128), bf16), np.zeros((0, 2, 64), bf16), np.ones(64, f32),
                                        num_heads=2, head_dim=64)
    assert qo.shape == (0, 2, 2, 64) and ko.shape == (0, 2, 64)
    assert rk.inverse_rotary_regroup(np.zeros((0, 16), f16), num_heads=2, head_dim=8, num_groups=2).shape == (2, 0, 8)


# ---- every other argument error is a ropekit.Error ----------------------------------------------

INV = np.ones(4, f32)
ARG_ERRORS = [
    ("X_none", lambda: ONNX(None, COS, SIN, POS), True),
    ("position_ids_none_ms", lambda: MS(X4, None, COS, SIN), True),
    ("rope_type_list", lambda: rk.rope_inv_freq(["default"], rotary_dim=8, rope_theta=1e4), True),
    ("rope_type_unknown", lambda: rk.rope_inv_freq("nonesuch", rotary_dim=8, rope_theta=1e4), False),
    ("rotary_dim_str", lambda: rk.rope_inv_freq(rotary_dim="8", rope_theta=1e4), True),
    ("rotary_dim_float", lambda: rk.rope_inv_freq(rotary_dim=8.0, rope_theta=1e4), True),
    ("rotary_dim_huge", lambda: rk.rope_inv_freq(rotary_dim=2**64, rope_theta=1e4), False),
    ("rotary_dim_2_62", lambda: rk.rope_inv_freq(rotary_dim=2**62, rope_theta=1e4), False),  # was numpy's ValueError
    ("rotary_dim_2_32", lambda: rk.rope_inv_freq(rotary_dim=2**32, rope_theta=1e4), False),  # allocated 8 GiB before the refusal
    ("rope_theta_str", lambda: rk.rope_inv_freq(rotary_dim=8, rope_theta="1e4"), True),
    ("truncate_str", lambda: rk.rope_inv_freq("yarn", rotary_dim=8, rope_theta=1e4, factor=4.0,
                                              original_max_position_embeddings=4096, truncate="no"), True),
    ("long_factor_strings", lambda: rk.rope_inv_freq("longrope", rotary_dim=8, rope_theta=1e4,
                                                     long_factor=["a"] * 4, short_factor=[1.0] * 4), True),
    ("seq_len_float", lambda: rk.rope_inv_freq(rotary_dim=8, rope_theta=1e4, seq_len=1.5), True),
    ("num_positions_float", lambda: rk.rope_cos_sin_table(INV, 10.0), True),
    ("num_positions_huge", lambda: rk.rope_cos_sin_table(INV, 2**64), False),
    ("num_positions_too_many", lambda: rk.rope_cos_sin_table(INV, 2**62), False),
    ("table_dtype_float64", lambda: rk.rope_cos_sin_table(INV, 10, dtype=np.float64), True),
    ("table_dtype_junk", lambda: rk.rope_cos_sin_table(INV, 10, dtype="nonesuch"), True),
    ("mode_none", lambda: rk.rope_cos_sin_table(INV, 10, mode=None), True),
    ("inv_freq_strings", lambda: rk.rope_cos_sin_table(["a", "b"], 10), True),
    ("inv_freq_2d", lambda: rk.rope_cos_sin_table(np.ones((2, 2), f32), 10), False),
    ("regroup_huge_heads", lambda: rk.inverse_rotary_regroup(X3[0], num_heads=2**31, head_dim=2**31), False),
    ("qknorm_huge_heads", lambda: rk.qknorm_rotary_embedding(X3, X3[:, :, :8], np.ones(8, f32), num_heads=2**40,
                                                             head_dim=2**20, simulate_fp8=0), False),
]


@pytest.mark.parametrize("name,call,type_error", ARG_ERRORS, ids=[c[0] for c in ARG_ERRORS])
def test_argument_errors_are_ropekit_errors(name, call, type_error):
    raises_error(call, type_error=type_error)
