"""Table builders: rope_inv_freq against transformers fixtures (tests/fixtures/rope_tables),
rope_cos_sin_table 'graph' mode against the fixtures' cos/sin, 'accurate' mode against float64."""

import json
import pathlib

import numpy as np
import pytest

import oracle as O
import ropekit

FIXTURE_DIR = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "rope_tables"
FIXTURES = sorted(FIXTURE_DIR.glob("*.json"))
# Tightest tolerances that hold (measured; see the report): HF computes pow in float32 with a
# <= 1 ulp powf, ropekit in double rounded once.
# transformers evaluates the formulas in float32 (several roundings); worst seen per type:
INV_FREQ_MAX_ULP = {"default": 1.0, "linear": 1.0, "yarn": 1.0, "longrope": 2.0, "llama3": 3.0}
TABLE_MAX_ULP = {True: 1.0, False: 2.0}  # [attention_factor == 1]: <= 1 ulp of cos, times the factor


def test_fixtures_present():
    assert len(FIXTURES) >= 1, f"no rope table fixtures in {FIXTURE_DIR}"


def _load(path):
    return json.loads(path.read_text())


def _params(fx):
    p = fx["params"]
    kw = {k: p.get(k) for k in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
                                "mscale_all_dim", "attention_factor", "low_freq_factor", "high_freq_factor",
                                "long_factor", "short_factor")}
    kw["truncate"] = True if p.get("truncate") is None else bool(p["truncate"])
    return {k: v for k, v in kw.items() if v is not None}


def _inv_freq(fx):
    kw = _params(fx)
    return ropekit.rope_inv_freq(fx["rope_type"], rotary_dim=fx["rotary_dim"], rope_theta=fx["rope_theta"],
                                 max_position_embeddings=fx["max_position_embeddings"],
                                 seq_len=fx["seq_len"] or 0, **kw)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_inv_freq_and_attention_factor(path):
    fx = _load(path)
    assert fx["rotary_dim"] == int(fx["head_dim"] * fx["partial_rotary_factor"])
    inv, af = _inv_freq(fx)
    want = np.array(fx["inv_freq"], np.float64).astype(np.float32)
    assert inv.dtype == np.float32 and inv.shape == want.shape
    rel = np.abs(inv.astype(np.float64) - want) / want
    u = O.ulp_err(inv, want, np.float32)
    O.report(("inv_freq vs transformers", "max rel err"), rel.max())
    O.report(("inv_freq vs transformers", "max ulp"), u.max())
    O.report(("inv_freq vs transformers", "entries differing (max per fixture)"), int((u > 0).sum()))
    tol = INV_FREQ_MAX_ULP[fx["rope_type"]]
    assert u.max() <= tol, (u.max(), np.argwhere(u > tol).ravel())
    assert rel.max() <= 3e-7
    assert abs(af - fx["attention_factor"]) <= 1e-6 * abs(fx["attention_factor"]), (af, fx["attention_factor"])
    # the header: 'the maths is done in double and rounded once' -> within 0.5 ulp of a float64
    # transcription of the same formulas
    inv64, af64 = O.inv_freq64(fx["rope_type"], fx["rotary_dim"], fx["rope_theta"],
                               max_position_embeddings=fx["max_position_embeddings"], seq_len=fx["seq_len"] or 0,
                               **_params(fx))
    u64 = O.ulp_err(inv, inv64, np.float32)
    O.report(("inv_freq vs float64 transcription", "max ulp"), u64.max())
    assert u64.max() <= 0.5 + 1e-6, (u64.max(), np.argwhere(u64 > 0.5 + 1e-6).ravel())
    assert abs(af - np.float32(af64)) <= 1e-7 * af64


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_graph_table_matches_transformers(path):
    fx = _load(path)
    inv = np.array(fx["inv_freq"], np.float64).astype(np.float32)
    pos = np.array(fx["positions"], np.int64)
    cos, sin = ropekit.rope_cos_sin_table(inv, int(pos.max()) + 1, attention_factor=fx["attention_factor"],
                                          mode="graph")
    assert cos.shape == (pos.max() + 1, inv.shape[0]) and cos.dtype == np.float32
    for name, got, want in (("cos", cos[pos], fx["cos"]), ("sin", sin[pos], fx["sin"])):
        want = np.array(want, np.float64).astype(np.float32)
        d = np.abs(got.astype(np.float64) - want)
        u = O.ulp_err(got, want, np.float32)
        O.report(("graph table vs transformers", name, "max abs"), d.max())
        O.report(("graph table vs transformers", name, "max ulp"), u.max())
        O.report(("graph table vs transformers", name, "% entries not bit-exact"), 100 * (u > 0).mean())
        tol = TABLE_MAX_ULP[fx["attention_factor"] == 1.0]
        assert u.max() <= tol, (name, u.max(), np.argwhere(u > tol)[:5])
        assert d.max() <= 2.5e-7 * fx["attention_factor"], (name, d.max())


def _accurate_ref(inv, P, af, dt):
    ang = np.arange(P, dtype=np.float64)[:, None] * inv.astype(np.float64)[None, :]  # exact in double
    a = np.float64(np.float32(af))
    return O.round_once(np.cos(ang) * a, dt), O.round_once(np.sin(ang) * a, dt)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("path", FIXTURES[:4] + FIXTURES[-2:], ids=[p.stem for p in FIXTURES[:4] + FIXTURES[-2:]])
def test_accurate_table(path, dtype):
    fx = _load(path)
    dt = O.DTYPES[dtype]
    inv = np.array(fx["inv_freq"], np.float64).astype(np.float32)
    P = 3000
    af = fx["attention_factor"]
    cos, sin = ropekit.rope_cos_sin_table(inv, P, attention_factor=af, mode="accurate", dtype=dt)
    wc, ws = _accurate_ref(inv, P, af, dt)
    assert cos.dtype == dt and cos.shape == (P, inv.shape[0])
    for got, want in ((cos, wc), (sin, ws)):
        bad = got.view(np.uint16 if dt.itemsize == 2 else np.uint32) != want.view(
            np.uint16 if dt.itemsize == 2 else np.uint32)
        O.report(("accurate table vs float64", dtype, "entries not bit-exact"), int(bad.sum()))
        assert not bad.any(), (np.argwhere(bad)[:5], got[bad][:5], want[bad][:5])


def test_accurate_table_long_positions():
    inv = (1.0 / 10000.0 ** (np.arange(0, 128, 2) / 128)).astype(np.float32)
    cos, sin = ropekit.rope_cos_sin_table(inv, 131072, mode="accurate")
    rows = np.array([0, 1, 4095, 65536, 100000, 131071])
    wc, ws = _accurate_ref(inv, 131072, 1.0, O.F32)
    assert np.array_equal(cos[rows], wc[rows]) and np.array_equal(sin[rows], ws[rows])


def test_graph_table_definition():
    """graph mode: angle = float32(float32(p) * inv); c = float32(cos(angle)) * float32(af)."""
    inv = (1.0 / 10000.0 ** (np.arange(0, 64, 2) / 64)).astype(np.float32)
    af = 1.1902380714238083
    P = 5000
    ang = (np.arange(P, dtype=np.float32)[:, None] * inv[None, :]).astype(np.float64)  # float32 product
    for dt in (O.F32, O.F16, O.BF16):
        cos, sin = ropekit.rope_cos_sin_table(inv, P, attention_factor=af, mode="graph", dtype=dt)
        for got, f in ((cos, np.cos), (sin, np.sin)):
            want = (f(ang).astype(np.float32) * np.float32(af)).astype(dt)  # correctly rounded cos of the angle
            u = O.ulp_err(got, want, dt)
            O.report(("graph table vs float32-angle definition", dt.name, "max ulp"), u.max())
            O.report(("graph table vs float32-angle definition", dt.name, "entries not bit-exact"), int((u > 0).sum()))
            assert u.max() <= 1.0


def test_dynamic_is_unsupported():
    with pytest.raises(ropekit.Error) as e:
        ropekit.rope_inv_freq("dynamic", rotary_dim=128, rope_theta=10000.0, factor=2.0,
                              max_position_embeddings=4096)
    assert e.value.status == "ROPEKIT_ERROR_UNSUPPORTED"
