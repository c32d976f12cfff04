"""Case generators (deterministic given the rng): random cases for the three rotary operators, and
the QKNormRotaryEmbedding / InverseRotaryRegroup geometries and inputs. Used by the pytest suites
and by scripts/make_shared_cases.py (tests/cases/*.bin, the vectors every backend is tested on)."""

import warnings

import numpy as np

import oracle as O


def onnx_backend_rotary_cases():
    """The onnx package's own backend test cases of RotaryEmbedding (the .pb data is not in the
    wheel, so its case generators are run), the single-node ones: the *_expanded cases are the
    same data through the function body."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases("RotaryEmbedding")
    return [c for c in cases if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type == "RotaryEmbedding"]


def _common(rng, dt):
    B, S, N, H, R = O.rand_geometry(rng)
    rank = int(rng.choice([3, 4]))
    x = O.rand_x(rng, B, S, N, H, rank, dt)
    attrs = dict(interleaved=int(rng.integers(0, 2)),
                 rotary_embedding_dim=R if (R < H or rng.random() < 0.5) else 0,
                 num_heads=N if (rank == 3 or rng.random() < 0.5) else 0,
                 inverse=int(rng.random() < 0.2))
    return B, S, N, H, R, x, attrs


def _scale(rng):
    return 1.0 if rng.random() < 0.5 else float(np.float32(rng.choice([0.5, 0.75, 1.5, rng.uniform(0.3, 2.0)])))


def _rows(rng, S):
    """Table rows P. Mostly P >= S; sometimes P < S (allowed by ropekit as long as every id is in
    range; ORT rejects S > P, so such cases are compared with the oracle only)."""
    return int(rng.integers(1, S + 1)) if rng.random() < 0.15 else int(rng.integers(S, S + 40))


def onnx_case(rng, dt, tab_dt=None):
    """ai.onnx.RotaryEmbedding: args (X, cos, sin, position_ids or None)."""
    tab_dt = tab_dt or dt
    B, S, N, H, R, x, attrs = _common(rng, dt)
    h = R // 2
    if rng.random() < 0.7:
        P = _rows(rng, S)
        cos, sin = O.rand_tables(rng, P, h, tab_dt)
        pos = rng.integers(0, P, (B, S)).astype(np.int64)
    else:
        cos, sin = O.rand_tables(rng, B * S, h, tab_dt)
        cos, sin, pos = cos.reshape(B, S, h), sin.reshape(B, S, h), None
    return dict(args=(x, cos, sin, pos), attrs=attrs)


def ms_case(rng, dt, tab_dt=None):
    """com.microsoft.RotaryEmbedding: args (input, position_ids, cos, sin)."""
    tab_dt = tab_dt or dt
    B, S, N, H, R, x, attrs = _common(rng, dt)
    P = _rows(rng, S)
    cos, sin = O.rand_tables(rng, P, R // 2, tab_dt)
    if P >= S and rng.random() < 0.4:
        pos = np.array([rng.integers(0, P - S + 1)], np.int64)
    else:
        pos = rng.integers(0, P, (B, S)).astype(np.int64)
    attrs["scale"] = _scale(rng)
    return dict(args=(x, pos, cos, sin), attrs=attrs)


def mrope_case(rng, dt, tab_dt=None):
    """com.microsoft.MRotaryEmbedding: args (input, position_ids (3, B, S), cos, sin)."""
    tab_dt = tab_dt or dt
    B, S, N, H, R, x, attrs = _common(rng, dt)
    h = R // 2
    cut = np.sort(rng.integers(0, h + 1, 2))
    section = [int(cut[0]), int(cut[1] - cut[0]), int(h - cut[1])]
    P = _rows(rng, S)
    cos, sin = O.rand_tables(rng, P, h, tab_dt)
    pos = rng.integers(0, P, (3, B, S)).astype(np.int64)
    if rng.random() < 0.2:  # text tokens: three equal streams
        pos[1] = pos[2] = pos[0]
    attrs.update(mrope_section=section, mrope_layout=int(rng.integers(0, 2)), scale=_scale(rng))
    return dict(args=(x, pos, cos, sin), attrs=attrs)


# ---- QKNormRotaryEmbedding / InverseRotaryRegroup (used by test_qknorm_regroup.py) -------------

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


def qknorm_inputs(rng, B, S, nh, hd, rope, dt, zero_block=False):
    """QKNormRotaryEmbedding inputs: query (B, S, nh*hd) and kv (B, S, hd) in dt, kv_norm_weight
    (hd,) and pre-interleaved cos, sin (B, S, rope) in float32. zero_block zeroes kv[0, 0, :64]
    (an fp8 block with amax = 0) and the first query head of token (0, 0) (ss = 0)."""
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


REGROUP_CASES = [  # (N, num_heads, head_dim, rope_head_dim)
    (5, 4, 16, 4), (3, 8, 64, 16), (4, 2, 9, 4), (2, 16, 10, 6), (7, 1, 8, 8), (3, 4, 512, 64), (6, 2, 12, 2),
]
# (N, num_heads, head_dim, rope_head_dim, num_groups)
REGROUP_PARAMS = [(*c, G) for c in REGROUP_CASES for G in (1, 2, 4, 8) if (c[1] * c[2]) % G == 0]


def regroup_inputs(rng, N, nh, hd, rope, dt):
    """InverseRotaryRegroup inputs: x (N, nh*hd) in dt, pre-interleaved cos, sin (N, rope) float32."""
    x = O.rand_vals(rng, (N, nh * hd), dt, 3.0)
    ang = rng.uniform(-np.pi, np.pi, (N, rope // 2))
    cos = np.repeat(np.cos(ang), 2, -1).astype(np.float32)
    sin = np.repeat(np.sin(ang), 2, -1).astype(np.float32)
    return x, cos, sin
