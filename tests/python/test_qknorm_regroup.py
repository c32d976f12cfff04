"""QKNormRotaryEmbedding and InverseRotaryRegroup against the numpy transcription of the contract
(include/ropekit.h 3.4/3.5, operators.md 4/5) in oracle.py."""

import numpy as np
import pytest

import oracle as O
import ropekit

UPSTREAM_TOL = {"float32": 2e-5, "float16": 6e-3, "bfloat16": 4e-2}
DTYPES = list(UPSTREAM_TOL)

# (B, S, num_heads, head_dim, rope_head_dim, simulate_fp8)
QK_CASES = [
    (2, 3, 4, 128, 64, 1),
    (1, 2, 2, 512, 64, 1),   # DeepSeek-V4 sizes (nope 448)
    (2, 2, 3, 64, 0, 1),     # rope_head_dim 0, one fp8 block
    (1, 3, 2, 192, 64, 1),   # two fp8 blocks
    (2, 2, 2, 68, 4, 1),
    (2, 3, 4, 128, 64, 0),
    (2, 2, 3, 10, 4, 0),     # nope 6
    (2, 2, 3, 9, 4, 0),      # odd nope 5
    (1, 3, 2, 13, 6, 0),     # odd nope 7
    (2, 2, 2, 24, 24, 0),    # nope 0: everything rotated
    (1, 2, 5, 16, 0, 0),     # plain norm
    (1, 1, 1, 1, 0, 0),
    (3, 1, 1, 40, 2, 0),
]


def _qk_inputs(rng, B, S, nh, hd, rope, dt, zero_block=False):
    scale = 10.0 ** rng.uniform(-2, 1)
    q = O.rand_vals(rng, (B, S, nh * hd), dt, scale)
    kv = O.rand_vals(rng, (B, S, hd), dt, scale)
    if zero_block:
        kv[0, 0, :64] = 0  # amax = 0 block
        q[0, 0, :hd] = 0  # a zero query head (ss = 0)
    w = (1 + 0.2 * rng.standard_normal(hd)).astype(np.float32)
    ang = rng.uniform(-np.pi, np.pi, (B, S, rope // 2))
    cos = np.repeat(np.cos(ang), 2, -1).astype(np.float32)
    sin = np.repeat(np.sin(ang), 2, -1).astype(np.float32)
    return q, kv, w, cos, sin


def _ulps(got, want, dt):
    return O.ulp_err(got, O.to64(want), dt)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,S,nh,hd,rope,fp8", QK_CASES, ids=[f"hd{c[3]}-rope{c[4]}-fp8{c[5]}-nh{c[2]}" for c in QK_CASES])
def test_qknorm(B, S, nh, hd, rope, fp8, dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng([hd, rope, fp8, nh, DTYPES.index(dtype)])
    for rep in range(3):
        q, kv, w, cos, sin = _qk_inputs(rng, B, S, nh, hd, rope, dt, zero_block=(rep == 0 and hd - rope >= 64))
        attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rope, epsilon=1e-6, simulate_fp8=fp8)
        qo, ko = ropekit.qknorm_rotary_embedding(q, kv, w, cos if rope else None, sin if rope else None, **attrs)
        eq, ek, _, amb = O.qknorm(q, kv, w, cos, sin, **attrs)
        assert qo.shape == (B, S, nh, hd) and ko.shape == (B, S, hd) and qo.dtype == dt and ko.dtype == dt
        # kv elements of an ambiguous fp8 block may take the other binade (contract allows it)
        ek_alt = O.qknorm(q, kv, w, cos, sin, **attrs, flip_ambiguous=True)[1]
        k_ok_alt = amb & (ko.astype(np.float64) == ek_alt.astype(np.float64))
        tol = UPSTREAM_TOL[dtype]
        dq = np.abs(qo.astype(np.float64) - eq.astype(np.float64))
        dk = np.where(k_ok_alt, 0.0, np.abs(ko.astype(np.float64) - ek.astype(np.float64)))
        uq, uk = _ulps(qo, eq, dt), np.where(k_ok_alt, 0.0, _ulps(ko, ek, dt))
        O.report(("qknorm", dtype, "max abs diff query / kv"), max(dq.max(), dk.max()))
        O.report(("qknorm", dtype, "max ulp vs contract transcription"), max(uq.max(), uk.max()))
        O.report(("qknorm", dtype, "elements not bit-exact (max per call)"), int((uq > 0).sum() + (uk > 0).sum()))
        O.report(("qknorm", dtype, "fp8 ambiguous-block elements (max per call)"), int(amb.sum()))
        flips = k_ok_alt & (ko.astype(np.float64) != ek.astype(np.float64))
        O.report(("qknorm", dtype, "fp8 elements matching only the flipped binade"), int(flips.sum()))
        assert dq.max() <= tol and dk.max() <= tol, (dq.max(), dk.max())
        # the contract fixes every rounding point: expect the same bits
        assert uq.max() == 0 and uk.max() == 0, (uq.max(), uk.max(), np.argwhere(uq > 0)[:5], np.argwhere(uk > 0)[:5])
        if rep == 0 and hd - rope >= 64 and fp8:
            assert (ko[0, 0, :64].astype(np.float32) == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_qknorm_in_place(dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng(11)
    B, S, nh, hd, rope = 2, 3, 2, 128, 64
    q, kv, w, cos, sin = _qk_inputs(rng, B, S, nh, hd, rope, dt)
    qo, ko = ropekit.qknorm_rotary_embedding(q, kv, w, cos, sin, num_heads=nh, head_dim=hd, rope_head_dim=rope)
    q4 = q.reshape(B, S, nh, hd)
    r = ropekit.qknorm_rotary_embedding(q, kv, w, cos, sin, num_heads=nh, head_dim=hd, rope_head_dim=rope,
                                        out=(q4, kv))
    assert r[0] is q4 and r[1] is kv
    assert np.array_equal(q4.view(np.uint8), qo.view(np.uint8))
    assert np.array_equal(kv.view(np.uint8), ko.view(np.uint8))


def test_round_trip_qknorm_then_regroup():
    rng = np.random.default_rng(5)
    for B, S, nh, hd, rope in [(2, 3, 4, 128, 64), (1, 4, 2, 9, 4), (2, 2, 3, 24, 24), (1, 3, 2, 576, 64)]:
        q, kv, w, cos, sin = _qk_inputs(rng, B, S, nh, hd, rope, O.F32)
        qo, _ = ropekit.qknorm_rotary_embedding(q, kv, w, cos, sin, num_heads=nh, head_dim=hd, rope_head_dim=rope,
                                                simulate_fp8=0)
        back = ropekit.inverse_rotary_regroup(qo.reshape(B * S, nh * hd), cos.reshape(B * S, rope),
                                              sin.reshape(B * S, rope), num_heads=nh, head_dim=hd,
                                              rope_head_dim=rope, num_groups=1)
        qn = O.qknorm(q, kv, w, cos, sin, num_heads=nh, head_dim=hd, rope_head_dim=rope, simulate_fp8=0)[2]
        err = np.abs(back[0] - qn.reshape(B * S, nh * hd)).max()
        O.report(("qknorm -> regroup round trip", "float32", "max abs"), err)
        assert back.shape == (1, B * S, nh * hd) and err <= 1e-5, err


REGROUP_CASES = [  # (N, num_heads, head_dim, rope_head_dim)
    (5, 4, 16, 4), (3, 8, 64, 16), (4, 2, 9, 4), (2, 16, 10, 6), (7, 1, 8, 8), (3, 4, 512, 64), (6, 2, 12, 2),
]


REGROUP_PARAMS = [(*c, G) for c in REGROUP_CASES for G in (1, 2, 4, 8) if (c[1] * c[2]) % G == 0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N,nh,hd,rope,G", REGROUP_PARAMS)
def test_regroup(N, nh, hd, rope, G, dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng([N, nh, hd, rope, G])
    x = O.rand_vals(rng, (N, nh * hd), dt, 3.0)
    ang = rng.uniform(-np.pi, np.pi, (N, rope // 2))
    cos = np.repeat(np.cos(ang), 2, -1).astype(np.float32)
    sin = np.repeat(np.sin(ang), 2, -1).astype(np.float32)
    attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rope, num_groups=G)
    y = ropekit.inverse_rotary_regroup(x, cos, sin, **attrs)
    want = O.regroup(x, cos, sin, **attrs)
    assert y.shape == (G, N, nh * hd // G) and y.dtype == dt
    u = _ulps(y, want, dt).max()
    O.report(("regroup", dtype, "max ulp vs contract transcription"), u)
    assert np.abs(y.astype(np.float64) - want.astype(np.float64)).max() <= UPSTREAM_TOL[dtype]
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8)), u
    # rope_head_dim = 0: a pure reshape/transpose, bit for bit
    y0 = ropekit.inverse_rotary_regroup(x, None, None, num_heads=nh, head_dim=hd, num_groups=G)
    assert np.array_equal(y0.view(np.uint8), np.ascontiguousarray(x.reshape(N, G, -1).transpose(1, 0, 2)).view(np.uint8))
