"""Random case generators for the three rotary operators (deterministic given the rng)."""

import numpy as np

import oracle as O


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
