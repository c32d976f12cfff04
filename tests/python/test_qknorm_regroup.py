"""QKNormRotaryEmbedding and InverseRotaryRegroup against the numpy transcription of the contract
(include/ropekit.h 3.4/3.5, operators.md 4/5) in oracle.py."""

import numpy as np
import pytest

import cases as C
import oracle as O
import ropekit

UPSTREAM_TOL = {"float32": 2e-5, "float16": 6e-3, "bfloat16": 4e-2}
DTYPES = list(UPSTREAM_TOL)

QK_CASES = C.QK_CASES  # (B, S, num_heads, head_dim, rope_head_dim, simulate_fp8)
REGROUP_PARAMS = C.REGROUP_PARAMS  # (N, num_heads, head_dim, rope_head_dim, num_groups)


def _ulps(got, want, dt):
    return O.ulp_err(got, O.to64(want), dt)


def check_qknorm(q, kv, w, cos, sin, attrs, qo, ko, label="qknorm"):
    """Assert that (qo, ko), the outputs of QKNormRotaryEmbedding on these inputs, are the
    contract transcription's bits (within UPSTREAM_TOL as a first, coarser check); kv elements of
    an ambiguous fp8 block may take the other binade. Also used by test_shared_cases.py."""
    dt = q.dtype
    dtype = str(dt)
    B, S = q.shape[:2]
    nh, hd = attrs["num_heads"], attrs["head_dim"]
    eq, ek, _, amb = O.qknorm(q, kv, w, cos, sin, **attrs)
    assert qo.shape == (B, S, nh, hd) and ko.shape == (B, S, hd) and qo.dtype == dt and ko.dtype == dt
    # kv elements of an ambiguous fp8 block may take the other binade (contract allows it)
    ek_alt = O.qknorm(q, kv, w, cos, sin, **attrs, flip_ambiguous=True)[1]
    k_ok_alt = amb & (ko.astype(np.float64) == ek_alt.astype(np.float64))
    tol = UPSTREAM_TOL[dtype]
    dq = np.abs(qo.astype(np.float64) - eq.astype(np.float64))
    dk = np.where(k_ok_alt, 0.0, np.abs(ko.astype(np.float64) - ek.astype(np.float64)))
    uq, uk = _ulps(qo, eq, dt), np.where(k_ok_alt, 0.0, _ulps(ko, ek, dt))
    O.report((label, dtype, "max abs diff query / kv"), max(dq.max(), dk.max()))
    O.report((label, dtype, "max ulp vs contract transcription"), max(uq.max(), uk.max()))
    O.report((label, dtype, "elements not bit-exact (max per call)"), int((uq > 0).sum() + (uk > 0).sum()))
    O.report((label, dtype, "fp8 ambiguous-block elements (max per call)"), int(amb.sum()))
    flips = k_ok_alt & (ko.astype(np.float64) != ek.astype(np.float64))
    O.report((label, dtype, "fp8 elements matching only the flipped binade"), int(flips.sum()))
    assert dq.max() <= tol and dk.max() <= tol, (dq.max(), dk.max())
    # the contract fixes every rounding point: expect the same bits
    assert uq.max() == 0 and uk.max() == 0, (uq.max(), uk.max(), np.argwhere(uq > 0)[:5], np.argwhere(uk > 0)[:5])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,S,nh,hd,rope,fp8", QK_CASES, ids=[f"hd{c[3]}-rope{c[4]}-fp8{c[5]}-nh{c[2]}" for c in QK_CASES])
def test_qknorm(B, S, nh, hd, rope, fp8, dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng([hd, rope, fp8, nh, DTYPES.index(dtype)])
    for rep in range(3):
        q, kv, w, cos, sin = C.qknorm_inputs(rng, B, S, nh, hd, rope, dt, zero_block=(rep == 0 and hd - rope >= 64))
        attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rope, epsilon=1e-6, simulate_fp8=fp8)
        qo, ko = ropekit.qknorm_rotary_embedding(q, kv, w, cos if rope else None, sin if rope else None, **attrs)
        check_qknorm(q, kv, w, cos, sin, attrs, qo, ko)
        if rep == 0 and hd - rope >= 64 and fp8:
            assert (ko[0, 0, :64].astype(np.float32) == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_qknorm_in_place(dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng(11)
    B, S, nh, hd, rope = 2, 3, 2, 128, 64
    q, kv, w, cos, sin = C.qknorm_inputs(rng, B, S, nh, hd, rope, dt)
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
        q, kv, w, cos, sin = C.qknorm_inputs(rng, B, S, nh, hd, rope, O.F32)
        qo, _ = ropekit.qknorm_rotary_embedding(q, kv, w, cos, sin, num_heads=nh, head_dim=hd, rope_head_dim=rope,
                                                simulate_fp8=0)
        back = ropekit.inverse_rotary_regroup(qo.reshape(B * S, nh * hd), cos.reshape(B * S, rope),
                                              sin.reshape(B * S, rope), num_heads=nh, head_dim=hd,
                                              rope_head_dim=rope, num_groups=1)
        qn = O.qknorm(q, kv, w, cos, sin, num_heads=nh, head_dim=hd, rope_head_dim=rope, simulate_fp8=0)[2]
        err = np.abs(back[0] - qn.reshape(B * S, nh * hd)).max()
        O.report(("qknorm -> regroup round trip", "float32", "max abs"), err)
        assert back.shape == (1, B * S, nh * hd) and err <= 1e-5, err



def check_regroup(x, cos, sin, attrs, y, label="regroup"):
    """Assert that y, the output of InverseRotaryRegroup on these inputs, is the contract
    transcription's bits (within UPSTREAM_TOL as a first, coarser check). Also used by
    test_shared_cases.py."""
    dt = x.dtype
    dtype = str(dt)
    N = x.shape[0]
    G, F = attrs["num_groups"], attrs["num_heads"] * attrs["head_dim"]
    want = O.regroup(x, cos, sin, **attrs)
    assert y.shape == (G, N, F // G) and y.dtype == dt
    u = _ulps(y, want, dt).max()
    O.report((label, dtype, "max ulp vs contract transcription"), u)
    assert np.abs(y.astype(np.float64) - want.astype(np.float64)).max() <= UPSTREAM_TOL[dtype]
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8)), u


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N,nh,hd,rope,G", REGROUP_PARAMS)
def test_regroup(N, nh, hd, rope, G, dtype):
    dt = O.DTYPES[dtype]
    rng = np.random.default_rng([N, nh, hd, rope, G])
    x, cos, sin = C.regroup_inputs(rng, N, nh, hd, rope, dt)
    attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rope, num_groups=G)
    y = ropekit.inverse_rotary_regroup(x, cos, sin, **attrs)
    check_regroup(x, cos, sin, attrs, y)
    # rope_head_dim = 0: a pure reshape/transpose, bit for bit
    y0 = ropekit.inverse_rotary_regroup(x, None, None, num_heads=nh, head_dim=hd, num_groups=G)
    assert np.array_equal(y0.view(np.uint8), np.ascontiguousarray(x.reshape(N, G, -1).transpose(1, 0, 2)).view(np.uint8))
