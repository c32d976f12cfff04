"""Every class of invalid input: the right status, a message naming the argument, and the
output (pre-filled with a sentinel) left untouched."""

import ml_dtypes
import numpy as np
import pytest

import ropekit as rk

f32, f16, bf16, i64 = np.float32, np.float16, ml_dtypes.bfloat16, np.int64
B, N, S, H = 2, 2, 3, 8


def z(shape, dt=f32):
    return np.zeros(shape, dt)


def ramp(shape, dt=f32):
    return (np.arange(int(np.prod(shape))) % 13 - 6).reshape(shape).astype(f32).astype(dt)


X4, X3 = ramp((B, N, S, H)), ramp((B, S, N * H))
COS, SIN = ramp((10, H // 2)) / 8, ramp((10, H // 2)) / 9
POS = np.array([[0, 1, 2], [3, 4, 5]], i64)
POS3 = np.stack([POS, POS, POS])
ONNX, MS, MR = rk.rotary_embedding, rk.ms_rotary_embedding, rk.mrotary_embedding


def sentinel(shape, dt=f32):
    return np.full(shape, 7, dt)


# (id, call(out), out (sentinel) or None, expected status or exception type, substrings of the message)
# The binding's own checks of Python arguments (types, int64 range, alignment): test_arguments.py.
CASES = [
    ("odd_rotary_dim", lambda o: ONNX(X4, z((10, 2)), z((10, 2)), POS, rotary_embedding_dim=5, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["rotary_embedding_dim", "5"]),
    ("odd_rotary_dim_ms", lambda o: MS(X4, POS, z((10, 3)), z((10, 3)), rotary_embedding_dim=7, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["rotary_embedding_dim", "7"]),
    ("odd_head_size_full_rotation", lambda o: ONNX(ramp((1, 2, 3, 7)), z((10, 3)), z((10, 3)), POS[:1], out=o),
     sentinel((1, 2, 3, 7)), "INVALID_ATTRIBUTE", ["7", "even"]),
    ("rotary_dim_gt_head", lambda o: ONNX(X4, z((10, 5)), z((10, 5)), POS, rotary_embedding_dim=10, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["rotary_embedding_dim", "10"]),
    ("negative_position_id", lambda o: ONNX(X4, COS, SIN, np.array([[0, 1, 2], [3, -1, 5]]), out=o),
     sentinel(X4.shape), "POSITION_OUT_OF_RANGE", ["position_ids[1][1]", "-1"]),
    ("position_id_ge_rows", lambda o: ONNX(X4, COS, SIN, np.array([[0, 1, 2], [3, 4, 10]]), out=o),
     sentinel(X4.shape), "POSITION_OUT_OF_RANGE", ["position_ids[1][2]", "= 10", "10)"]),
    ("ms_position_id_ge_rows", lambda o: MS(X3, np.array([[0, 1, 2], [3, 70000, 5]]), COS, SIN, num_heads=N, out=o),
     sentinel(X3.shape), "POSITION_OUT_OF_RANGE", ["position_ids[1][1]", "70000"]),
    ("mrope_position_id_ge_rows", lambda o: MR(X4, np.stack([POS, POS, POS + 5]), COS, SIN, mrope_section=[2, 1, 1], out=o),
     sentinel(X4.shape), "POSITION_OUT_OF_RANGE", ["position_ids[2][1][2]", "= 10"]),
    ("ms_offset_plus_S_gt_rows", lambda o: MS(X4, np.array([8]), COS, SIN, out=o),
     sentinel(X4.shape), "POSITION_OUT_OF_RANGE", ["offset", "8", "cos_cache"]),
    ("ms_negative_offset", lambda o: MS(X4, np.array([-1]), COS, SIN, out=o),
     sentinel(X4.shape), "POSITION_OUT_OF_RANGE", ["-1"]),
    ("num_heads_missing_rank3", lambda o: ONNX(X3, COS, SIN, POS, out=o),
     sentinel(X3.shape), "INVALID_ATTRIBUTE", ["num_heads"]),
    ("num_heads_missing_rank3_ms", lambda o: MS(X3, POS, COS, SIN, out=o),
     sentinel(X3.shape), "INVALID_ATTRIBUTE", ["num_heads"]),
    ("hidden_not_divisible", lambda o: ONNX(X3, COS, SIN, POS, num_heads=3, out=o),
     sentinel(X3.shape), "SHAPE", ["num_heads", "16"]),
    ("rank4_num_heads_mismatch", lambda o: ONNX(X4, COS, SIN, POS, num_heads=3, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["num_heads", "3"]),
    ("table_width_ne_half", lambda o: ONNX(X4, z((10, 3)), z((10, 3)), POS, out=o),
     sentinel(X4.shape), "SHAPE", ["cos_cache", "3"]),
    ("table_width_ne_half_ms", lambda o: MS(X4, POS, z((10, 2)), z((10, 2)), out=o),
     sentinel(X4.shape), "SHAPE", ["cos_cache"]),
    ("cos_sin_shape_mismatch", lambda o: ONNX(X4, COS, z((11, 4)), POS, out=o),
     sentinel(X4.shape), "SHAPE", ["sin_cache"]),
    ("cos_sin_dtype_mismatch", lambda o: ONNX(X4, COS, SIN.astype(f16), POS, out=o),
     sentinel(X4.shape), "DTYPE", ["sin_cache", "float16"]),
    ("table_dtype_not_T_or_f32", lambda o: ONNX(X4.astype(f16), COS.astype(bf16), SIN.astype(bf16), POS, out=o),
     sentinel(X4.shape, f16), "DTYPE", ["cos_cache", "bfloat16"]),
    ("table_3d_shape_without_ids", lambda o: ONNX(X4, z((2, 2, 4)), z((2, 2, 4)), out=o),
     sentinel(X4.shape), "SHAPE", ["cos_cache"]),
    ("x_y_dtype_mismatch", lambda o: ONNX(X4, COS, SIN, POS, out=o),
     sentinel(X4.shape, f16), "DTYPE", ["y", "float16"]),
    ("y_shape_mismatch", lambda o: ONNX(X4, COS, SIN, POS, out=o),
     sentinel((B, N, S, H + 1)), "SHAPE", ["y"]),
    ("position_ids_shape", lambda o: ONNX(X4, COS, SIN, z((B, S + 1), i64), out=o),
     sentinel(X4.shape), "SHAPE", ["position_ids"]),
    ("position_ids_shape_ms", lambda o: MS(X4, z((2,), i64), COS, SIN, out=o),
     sentinel(X4.shape), "SHAPE", ["position_ids"]),
    ("position_ids_shape_mrope", lambda o: MR(X4, POS, COS, SIN, mrope_section=[2, 1, 1], out=o),
     sentinel(X4.shape), "SHAPE", ["position_ids"]),
    ("interleaved_2", lambda o: ONNX(X4, COS, SIN, POS, interleaved=2, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["interleaved", "2"]),
    ("interleaved_2_mrope", lambda o: MR(X4, POS3, COS, SIN, mrope_section=[2, 1, 1], interleaved=2, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["interleaved"]),
    ("mrope_section_sum", lambda o: MR(X4, POS3, COS, SIN, mrope_section=[1, 1, 1], out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["mrope_section"]),
    ("mrope_section_negative", lambda o: MR(X4, POS3, COS, SIN, mrope_section=[5, -1, 0], out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["mrope_section"]),
    ("mrope_section_doubled", lambda o: MR(X4, POS3, COS, SIN, mrope_section=[4, 2, 2], out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["mrope_section"]),
    ("mrope_layout_2", lambda o: MR(X4, POS3, COS, SIN, mrope_section=[2, 1, 1], mrope_layout=2, out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["mrope_layout", "2"]),
    ("packed_batching_ms", lambda o: MS(X4, POS, COS, SIN, is_packed_batching=1, out=o),
     sentinel(X4.shape), "UNSUPPORTED", ["is_packed_batching"]),
    ("packed_batching_mrope", lambda o: MR(X4, POS3, COS, SIN, mrope_section=[2, 1, 1], is_packed_batching=1, out=o),
     sentinel(X4.shape), "UNSUPPORTED", ["is_packed_batching"]),
    ("ms_scale_nan", lambda o: MS(X4, POS, COS, SIN, scale=float("nan"), out=o),
     sentinel(X4.shape), "INVALID_ATTRIBUTE", ["scale"]),
    ("int32_x", lambda o: ONNX(X4.astype(np.int32), COS, SIN, POS, out=o), sentinel(X4.shape), rk.ArgumentTypeError, ["X"]),
    ("float64_x", lambda o: ONNX(X4.astype(np.float64), COS, SIN, POS, out=o), sentinel(X4.shape), rk.ArgumentTypeError, ["X"]),
    ("float64_table", lambda o: ONNX(X4, COS.astype(np.float64), SIN, POS, out=o), sentinel(X4.shape), rk.ArgumentTypeError,
     ["cos_cache"]),
    ("int32_table_ms", lambda o: MS(X4, POS, COS.astype(np.int32), SIN, out=o), sentinel(X4.shape), rk.ArgumentTypeError,
     ["cos_cache"]),
    ("float_position_ids", lambda o: ONNX(X4, COS, SIN, POS.astype(f32), out=o), sentinel(X4.shape), rk.ArgumentTypeError,
     ["position_ids"]),
    ("rank5", lambda o: ONNX(ramp((1, 1, 2, 3, 8)), COS, SIN, POS[:1], out=o), sentinel((1, 1, 2, 3, 8)), "SHAPE",
     ["X", "5"]),
    ("rank2", lambda o: ONNX(ramp((3, 8)), COS, SIN, POS[:1], num_heads=1, out=o), sentinel((3, 8)), "SHAPE",
     ["x"]),
    ("qknorm_fp8_nope_not_64", lambda o: rk.qknorm_rotary_embedding(
        ramp((1, 1, 140)), ramp((1, 1, 70)), np.ones(70, f32), z((1, 1, 4)), z((1, 1, 4)), num_heads=2, head_dim=70,
        rope_head_dim=4, out=o), (sentinel((1, 1, 2, 70)), sentinel((1, 1, 70))), "INVALID_ATTRIBUTE",
     ["simulate_fp8", "66"]),
    ("qknorm_odd_rope", lambda o: rk.qknorm_rotary_embedding(
        ramp((1, 1, 20)), ramp((1, 1, 10)), np.ones(10, f32), z((1, 1, 3)), z((1, 1, 3)), num_heads=2, head_dim=10,
        rope_head_dim=3, simulate_fp8=0, out=o), (sentinel((1, 1, 2, 10)), sentinel((1, 1, 10))),
     "INVALID_ATTRIBUTE", ["rope_head_dim", "3"]),
    ("qknorm_weight_dtype", lambda o: rk.qknorm_rotary_embedding(
        ramp((1, 1, 128)), ramp((1, 1, 64)), np.ones(64, f16), num_heads=2, head_dim=64, out=o),
     (sentinel((1, 1, 2, 64)), sentinel((1, 1, 64))), "DTYPE", ["kv_norm_weight"]),
    ("regroup_groups_not_dividing", lambda o: rk.inverse_rotary_regroup(
        ramp((3, 18)), num_heads=2, head_dim=9, num_groups=4, out=o), sentinel((4, 3, 4)), "INVALID_ATTRIBUTE",
     ["num_groups", "4"]),
    ("regroup_cos_dtype", lambda o: rk.inverse_rotary_regroup(
        ramp((3, 16)), z((3, 4), f16), z((3, 4), f16), num_heads=2, head_dim=8, rope_head_dim=4, out=o),
     sentinel((1, 3, 16)), "DTYPE", ["cos"]),
]


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8).copy()


@pytest.mark.parametrize("name,call,out,status,words", CASES, ids=[c[0] for c in CASES])
def test_error(name, call, out, status, words):
    outs = out if isinstance(out, tuple) else (out,)
    before = [_bits(o) for o in outs]
    inputs_before = [_bits(a) for a in (X4, X3, COS, SIN, POS)]
    if isinstance(status, str):
        with pytest.raises(rk.Error) as e:
            call(out)
        assert e.value.status == "ROPEKIT_ERROR_" + status, str(e.value)
    else:  # a wrong Python type: still a ropekit.Error (and a ValueError), also a TypeError
        with pytest.raises(status) as e:
            call(out)
        assert isinstance(e.value, rk.Error) and isinstance(e.value, TypeError), type(e.value)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in message {msg!r}"
    for o, b in zip(outs, before):
        assert np.array_equal(_bits(o), b), "output written on error"
    assert all(np.array_equal(_bits(a), b) for a, b in zip((X4, X3, COS, SIN, POS), inputs_before))


def test_error_in_place_leaves_input_untouched():
    x = X4.copy()
    with pytest.raises(rk.Error) as e:
        ONNX(x, COS, SIN, np.array([[0, 1, 2], [3, 4, 99]]), out=x)
    assert e.value.status == "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE"
    assert np.array_equal(x, X4)


def _aliasing_cases():
    buf = np.zeros(400, f32)
    x = buf[:48].reshape(1, 2, 3, 8)
    buf[:48] = ramp(48)
    yield "out_shifted_view_of_x", lambda: ONNX(x, COS, SIN, POS[:1], out=buf[1:49].reshape(1, 2, 3, 8)), buf, "y"
    buf2 = np.zeros(400, f32)
    cos = buf2[:40].reshape(10, 4)
    cos[:] = COS
    yield "out_overlaps_cos", lambda: ONNX(X4[:1], cos, SIN, POS[:1], out=buf2[8:56].reshape(1, 2, 3, 8)), buf2, "cos_cache"
    buf3 = np.zeros(400, f32)
    xs = buf3[:96].reshape(1, 3, 32)
    xs[:] = ramp((1, 3, 32))
    # same data pointer, different strides: not "identical view", so not in place
    yield "out_same_start_other_strides", lambda: MS(xs[:, :, :16], POS[:1], COS, SIN, num_heads=2,
                                                    out=buf3[:48].reshape(1, 3, 16)), buf3, "y"
    buf4 = np.zeros(400, f32)
    q = buf4[:128].reshape(1, 1, 128)
    q[:] = ramp((1, 1, 128))
    kv = ramp((1, 1, 64))
    yield "qknorm_outputs_overlap", lambda: rk.qknorm_rotary_embedding(
        q, kv, np.ones(64, f32), num_heads=2, head_dim=64, out=(q.reshape(1, 1, 2, 64), buf4[32:96].reshape(1, 1, 64))), buf4, "kv_out"
    buf5 = np.zeros(400, f32)
    xr = buf5[:48].reshape(3, 16)
    xr[:] = ramp((3, 16))
    yield "regroup_out_is_input", lambda: rk.inverse_rotary_regroup(xr, num_heads=2, head_dim=8,
                                                                    out=buf5[:48].reshape(1, 3, 16)), buf5, "out"


@pytest.mark.parametrize("name,call,buf,word", list(_aliasing_cases()), ids=[c[0] for c in _aliasing_cases()])
def test_aliasing(name, call, buf, word):
    before = buf.copy()
    with pytest.raises(rk.Error) as e:
        call()
    assert e.value.status == "ROPEKIT_ERROR_ALIASING", str(e.value)
    assert word in str(e.value)
    assert np.array_equal(buf, before), "memory written on error"


def test_unread_mrope_streams_are_not_checked():
    """Only the streams a layout reads must be in range."""
    bad = np.full((B, S), 99, i64)
    y0 = MR(X4, np.stack([POS, bad, -bad]), COS, SIN, mrope_section=[4, 0, 0])
    y1 = MR(X4, np.stack([POS, bad, POS]), COS, SIN, mrope_section=[2, 0, 2], mrope_layout=1)
    ref = ONNX(X4, COS, SIN, POS)
    assert np.array_equal(y0, ref)
    assert np.array_equal(y1, ref)  # T and W streams read, both equal to POS
    with pytest.raises(rk.Error) as e:
        MR(X4, np.stack([POS, bad, POS]), COS, SIN, mrope_section=[2, 1, 1], mrope_layout=1)
    assert e.value.status == "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE" and "position_ids[1][0][0] = 99" in str(e.value)


def test_dynamic_rope_unsupported_and_bad_table_args():
    with pytest.raises(rk.Error) as e:
        rk.rope_inv_freq("dynamic", rotary_dim=64, rope_theta=1e4, factor=2.0)
    assert e.value.status == "ROPEKIT_ERROR_UNSUPPORTED"
    with pytest.raises(rk.Error) as e:
        rk.rope_inv_freq("default", rotary_dim=7, rope_theta=1e4)
    assert e.value.status == "ROPEKIT_ERROR_INVALID_ATTRIBUTE" and "rotary_dim" in str(e.value)
    with pytest.raises(rk.Error) as e:
        rk.rope_inv_freq("default", rotary_dim=8, rope_theta=0.0)
    assert e.value.status == "ROPEKIT_ERROR_INVALID_ATTRIBUTE" and "rope_theta" in str(e.value)
