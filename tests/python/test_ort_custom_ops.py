"""libropekit_ort in the pinned onnxruntime wheel (CPU execution provider).

Each operator of the library, in each domain it is registered in (com.microsoft, ai.ropekit) and
each activation dtype, runs as a one-node model and is compared bit for bit with ropekit's own
binding (same CPU variant) and with the numpy transcription of the contract in oracle.py. Then:
bad inputs (onnxruntime error carrying ropekit's message), onnxruntime's thread pool (same bits
for 1 and 4 intra-op threads), several sessions concurrently from threads, and the built-in
com.microsoft contrib operators still working next to the custom com.microsoft domain.
bfloat16 has no numpy feed in onnxruntime's Python API: those models take float32 inputs and
Cast them (exactly: the values are bfloat16 values) and Cast their outputs back.
"""

import threading

import numpy as np
import onnx
import onnxruntime as ort
import oracle
import pytest
import ropekit
from onnx import TensorProto as TP
from onnx import helper

BF16 = ropekit.bfloat16
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": BF16}
LIB = ropekit.ort_custom_ops_library()


def _elem(dt):
    return TP.BFLOAT16 if np.dtype(dt) == BF16 else helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def build(op, domain, inputs, attrs, outputs):
    """One-node model. inputs: (name, array or None for an absent optional input); outputs:
    (name, dtype). bfloat16 tensors go through Cast nodes. Dims are symbolic, so shape errors
    reach the operator instead of onnxruntime's input checks."""
    nodes, graph_in, graph_out, names = [], [], [], []
    for n, a in inputs:
        if a is None:
            names.append("")
            continue
        if a.dtype == BF16:
            graph_in.append(helper.make_tensor_value_info(n + "_f", TP.FLOAT, [f"{n}{i}" for i in range(a.ndim)]))
            nodes.append(helper.make_node("Cast", [n + "_f"], [n], to=TP.BFLOAT16))
        else:
            graph_in.append(helper.make_tensor_value_info(n, _elem(a.dtype), [f"{n}{i}" for i in range(a.ndim)]))
        names.append(n)
    while names and names[-1] == "":
        names.pop()
    out_names = []
    for n, dt in outputs:
        if np.dtype(dt) == BF16:
            nodes_out = n + "_t"
            out_names.append(nodes_out)
        else:
            out_names.append(n)
    nodes.append(helper.make_node(op, names, out_names, domain=domain, name="node0", **attrs))
    for (n, dt), on in zip(outputs, out_names):
        if on != n:
            nodes.append(helper.make_node("Cast", [on], [n], to=TP.FLOAT))
            graph_out.append(helper.make_tensor_value_info(n, TP.FLOAT, None))
        else:
            graph_out.append(helper.make_tensor_value_info(n, _elem(dt), None))
    g = helper.make_graph(nodes, "g", graph_in, graph_out)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    m.ir_version = 10
    return m.SerializeToString()


def session(model, threads=1):
    so = ort.SessionOptions()
    so.register_custom_ops_library(LIB)
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def feeds(inputs):
    return {(n + "_f" if a.dtype == BF16 else n): (a.astype(np.float32) if a.dtype == BF16 else a)
            for n, a in inputs if a is not None}


def run(op, domain, inputs, attrs, outputs, threads=1):
    got = session(build(op, domain, inputs, attrs, outputs), threads).run(None, feeds(inputs))
    return [g.astype(dt) for g, (_, dt) in zip(got, outputs)]


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
    ua = a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)
    ub = b.view(np.uint32 if b.dtype.itemsize == 4 else np.uint16)
    bad = np.flatnonzero(ua != ub)
    assert bad.size == 0, f"{bad.size} of {a.size} differ, first at {bad[0]}: {a.flat[bad[0]]} vs {b.flat[bad[0]]}"


def rounded(y64, dt):
    """The contract's rounding of an exact-product result: once to float32, then to T."""
    return np.asarray(y64, np.float64).astype(np.float32).astype(dt)


def rand(rng, shape, dt, scale=1.0):
    return oracle.rand_vals(rng, shape, dt, scale)


def tables(rng, rows, width):
    ang = rng.uniform(-np.pi, np.pi, (rows, width // 2)).astype(np.float32)
    c = np.repeat(np.cos(ang), 2, axis=-1).astype(np.float32)
    s = np.repeat(np.sin(ang), 2, axis=-1).astype(np.float32)
    return c, s


# ---- QKNormRotaryEmbedding -----------------------------------------------------------------------

QK_CASES = [  # num_heads, head_dim, rope_head_dim, simulate_fp8
    (4, 128, 64, 1),
    (4, 128, 64, 0),
    (3, 13, 6, 0),  # odd nope: the partner comes from t's parity
    (2, 64, 0, 1),
]


def qknorm_inputs(rng, dt, B, S, nh, hd, rd):
    c, s = tables(rng, B * S, rd)
    return [("query", rand(rng, (B, S, nh * hd), dt, 3.0)), ("kv", rand(rng, (B, S, hd), dt, 2.0)),
            ("kv_norm_weight", rng.uniform(0.5, 1.5, hd).astype(np.float32)),
            ("cos", c.reshape(B, S, rd)), ("sin", s.reshape(B, S, rd))]


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
@pytest.mark.parametrize("dtname", list(DTYPES))
@pytest.mark.parametrize("case", QK_CASES, ids=lambda c: "nh{}_hd{}_rd{}_fp8{}".format(*c))
def test_qknorm(domain, dtname, case):
    dt = DTYPES[dtname]
    nh, hd, rd, fp8 = case
    rng = np.random.default_rng(hash((dtname, case)) % 2**32)
    B, S = 2, 3
    inputs = qknorm_inputs(rng, dt, B, S, nh, hd, rd)
    attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rd, epsilon=1e-6, simulate_fp8=fp8)
    qo, ko = run("QKNormRotaryEmbedding", domain, inputs, attrs, [("query_out", dt), ("kv_out", dt)])
    assert qo.shape == (B, S, nh, hd) and ko.shape == (B, S, hd)
    want_q, want_k = ropekit.qknorm_rotary_embedding(*[a for _, a in inputs], **attrs)
    same_bits(qo, want_q)
    same_bits(ko, want_k)
    oq, ok, _, amb = oracle.qknorm(*[a for _, a in inputs], **attrs)
    same_bits(qo, oq)
    keep = ~amb  # fp8 blocks whose scale sits on a power of two may take either binade
    same_bits(ko[keep], ok[keep])


# ---- InverseRotaryRegroup --------------------------------------------------------------------------


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
@pytest.mark.parametrize("dtname", list(DTYPES))
@pytest.mark.parametrize("case", [(4, 16, 8, 1), (4, 16, 8, 2), (8, 32, 0, 4), (3, 13, 6, 3)],
                         ids=lambda c: "nh{}_hd{}_rd{}_g{}".format(*c))
def test_regroup(domain, dtname, case):
    dt = DTYPES[dtname]
    nh, hd, rd, g = case
    rng = np.random.default_rng(hash((dtname, case, 1)) % 2**32)
    N = 5
    c, s = tables(rng, N, rd)
    inputs = [("input", rand(rng, (N, nh * hd), dt)), ("cos", c), ("sin", s)]
    attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rd, num_groups=g)
    (y,) = run("InverseRotaryRegroup", domain, inputs, attrs, [("output", dt)])
    assert y.shape == (g, N, nh * hd // g)
    same_bits(y, ropekit.inverse_rotary_regroup(*[a for _, a in inputs], **attrs))
    same_bits(y, oracle.regroup(*[a for _, a in inputs], **attrs))


def test_regroup_inverts_qknorm():
    """QKNormRotaryEmbedding (float, no fp8) then InverseRotaryRegroup (1 group) returns the
    normalized query to 1e-5 (operators.md 5), both run by onnxruntime."""
    rng = np.random.default_rng(7)
    nh, hd, rd, S = 4, 64, 32, 6
    inputs = qknorm_inputs(rng, np.float32, 1, S, nh, hd, rd)
    attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rd, simulate_fp8=0)
    qo, _ = run("QKNormRotaryEmbedding", "com.microsoft", inputs, attrs, [("q", np.float32), ("k", np.float32)])
    (back,) = run("InverseRotaryRegroup", "com.microsoft",
                  [("input", qo.reshape(S, nh * hd)), ("cos", inputs[3][1][0]), ("sin", inputs[4][1][0])],
                  dict(num_heads=nh, head_dim=hd, rope_head_dim=rd), [("y", np.float32)])
    _, _, qn, _ = oracle.qknorm(*[a for _, a in inputs], **attrs)
    assert np.max(np.abs(back.reshape(S, nh, hd) - qn[0])) < 1e-5


# ---- the three rotary operators (ai.ropekit) ------------------------------------------------------


def rope_case(rng, dt, table_dt, rank):
    B, S, N, H, R = 2, 5, 3, 10, 6
    x = oracle.rand_x(rng, B, S, N, H, rank, dt)
    P = 12
    c, s = oracle.rand_tables(rng, P, R // 2, table_dt)
    pos = rng.integers(0, P, (B, S)).astype(np.int64)
    return x, c, s, pos, dict(interleaved=int(rng.integers(0, 2)), rotary_embedding_dim=R, num_heads=N)


TABLES = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"),
          ("bfloat16", "bfloat16"), ("bfloat16", "float32")]


@pytest.mark.parametrize("xt,tt", TABLES)
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("inverse", [0, 1])
def test_rotary_embedding(xt, tt, rank, inverse):
    dt = DTYPES[xt]
    rng = np.random.default_rng(hash((xt, tt, rank, inverse)) % 2**32)
    x, c, s, pos, attrs = rope_case(rng, dt, DTYPES[tt], rank)
    attrs["inverse"] = inverse
    for p in (pos, None):
        cc, ss = (c, s) if p is not None else (c[pos], s[pos])
        inputs = [("X", x), ("cos_cache", cc), ("sin_cache", ss), ("position_ids", p)]
        (y,) = run("RotaryEmbedding", "ai.ropekit", inputs, attrs, [("Y", dt)])
        same_bits(y, ropekit.rotary_embedding(x, cc, ss, p, **attrs))
        y64, _ = oracle.onnx_rope(x, cc, ss, p, **attrs)
        same_bits(y, rounded(y64, dt))


@pytest.mark.parametrize("xt,tt", TABLES)
@pytest.mark.parametrize("offset", [False, True])
def test_ms_rotary_embedding(xt, tt, offset):
    dt = DTYPES[xt]
    rng = np.random.default_rng(hash((xt, tt, offset, 2)) % 2**32)
    x, c, s, pos, attrs = rope_case(rng, dt, DTYPES[tt], 3)
    if offset:
        pos = np.array([3], np.int64)
    attrs["scale"] = 1.0
    inputs = [("input", x), ("position_ids", pos), ("cos_cache", c), ("sin_cache", s)]
    (y,) = run("MsRotaryEmbedding", "ai.ropekit", inputs, attrs, [("Y", dt)])
    same_bits(y, ropekit.ms_rotary_embedding(x, pos, c, s, **attrs))
    y64, _ = oracle.ms_rope(x, pos, c, s, **attrs)
    same_bits(y, rounded(y64, dt))


@pytest.mark.parametrize("xt,tt", TABLES)
@pytest.mark.parametrize("layout", [0, 1])
def test_mrotary_embedding(xt, tt, layout):
    dt = DTYPES[xt]
    rng = np.random.default_rng(hash((xt, tt, layout, 3)) % 2**32)
    B, S, N, H, P = 2, 4, 2, 16, 20
    x = oracle.rand_x(rng, B, S, N, H, 3, dt)
    c, s = oracle.rand_tables(rng, P, H // 2, DTYPES[tt])
    pos = rng.integers(0, P, (3, B, S)).astype(np.int64)
    attrs = dict(mrope_section=[4, 2, 2], mrope_layout=layout, num_heads=N)
    inputs = [("input", x), ("position_ids", pos), ("cos_cache", c), ("sin_cache", s)]
    (y,) = run("MRotaryEmbedding", "ai.ropekit", inputs, attrs, [("Y", dt)])
    same_bits(y, ropekit.mrotary_embedding(x, pos, c, s, **attrs))
    y64, _ = oracle.mrope(x, pos, c, s, **attrs)
    same_bits(y, rounded(y64, dt))


# ---- errors: onnxruntime raises with ropekit's message -------------------------------------------


def expect_error(op, domain, inputs, attrs, outputs, *needles):
    sess = session(build(op, domain, inputs, attrs, outputs))
    with pytest.raises(Exception) as e:
        sess.run(None, feeds(inputs))
    msg = str(e.value)
    assert f"{domain}.{op} node 'node0'" in msg, msg
    for n in needles:
        assert n in msg, msg
    return sess


def test_error_position_out_of_range():
    rng = np.random.default_rng(11)
    x, c, s, pos, attrs = rope_case(rng, np.float32, np.float32, 3)
    pos[1, 2] = 70000
    sess = expect_error("RotaryEmbedding", "ai.ropekit", [("X", x), ("cos_cache", c), ("sin_cache", s),
                        ("position_ids", pos)], attrs, [("Y", np.float32)], "70000", "position_ids[1][2]",
                        "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE")
    pos[1, 2] = -1
    with pytest.raises(Exception, match="-1"):
        sess.run(None, feeds([("X", x), ("cos_cache", c), ("sin_cache", s), ("position_ids", pos)]))
    pos[1, 2] = 0  # the same session still works after errors
    sess.run(None, feeds([("X", x), ("cos_cache", c), ("sin_cache", s), ("position_ids", pos)]))
    off = np.array([10], np.int64)  # offset form: 10 + S > P
    expect_error("MsRotaryEmbedding", "ai.ropekit", [("input", x), ("position_ids", off), ("cos_cache", c),
                 ("sin_cache", s)], attrs, [("Y", np.float32)], "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE")


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
def test_error_qknorm(domain):
    rng = np.random.default_rng(12)
    good = qknorm_inputs(rng, np.float32, 1, 2, 2, 64, 0)
    attrs = dict(num_heads=2, head_dim=64, rope_head_dim=0)
    outs = [("q", np.float32), ("k", np.float32)]
    op = "QKNormRotaryEmbedding"
    bad = list(good)
    bad[1] = ("kv", good[1][1][..., :63])
    expect_error(op, domain, bad, attrs, outs, "kv", "ROPEKIT_ERROR_SHAPE")
    bad = list(good)
    bad[0] = ("query", good[0][1].reshape(2, 128))
    expect_error(op, domain, bad, attrs, outs, "query must be rank 3")
    expect_error(op, domain, good, dict(attrs, rope_head_dim=3, simulate_fp8=0), outs, "rope_head_dim")
    expect_error(op, domain, good, dict(attrs, head_dim=32, num_heads=4, simulate_fp8=1), outs,
                 "ROPEKIT_ERROR")  # nope 32 is not a multiple of 64
    expect_error(op, domain, good, dict(attrs, num_heads=0), outs, "num_heads")


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
def test_error_regroup(domain):
    rng = np.random.default_rng(13)
    c, s = tables(rng, 4, 8)
    inputs = [("input", rand(rng, (4, 32), np.float32)), ("cos", c), ("sin", s)]
    op, outs = "InverseRotaryRegroup", [("y", np.float32)]
    expect_error(op, domain, inputs, dict(num_heads=2, head_dim=16, rope_head_dim=8, num_groups=3), outs,
                 "num_groups = 3 does not divide")
    expect_error(op, domain, inputs, dict(num_heads=4, head_dim=16, rope_head_dim=8), outs, "channels per row")
    expect_error(op, domain, [inputs[0], ("cos", c[:3]), ("sin", s[:3])],
                 dict(num_heads=2, head_dim=16, rope_head_dim=8), outs, "cos")
    expect_error(op, domain, inputs, dict(num_heads=2, head_dim=16, rope_head_dim=18), outs, "rope_head_dim")


def test_error_mrope_section():
    rng = np.random.default_rng(14)
    x = rand(rng, (1, 2, 16), np.float32)
    c, s = oracle.rand_tables(rng, 4, 8, np.float32)
    model = build("MRotaryEmbedding", "ai.ropekit", [("input", x), ("position_ids", np.zeros((3, 1, 2), np.int64)),
                  ("cos_cache", c), ("sin_cache", s)], dict(mrope_section=[4, 4], num_heads=1), [("Y", np.float32)])
    with pytest.raises(Exception, match="mrope_section must have 3 values"):
        session(model)


# ---- threads ------------------------------------------------------------------------------------


def test_intra_op_thread_pool_same_bits():
    """Large enough for ropekit to split the call over onnxruntime's pool: the same bits as one
    thread and as the binding."""
    rng = np.random.default_rng(21)
    inputs = qknorm_inputs(rng, np.float16, 4, 64, 8, 128, 64)
    attrs = dict(num_heads=8, head_dim=128, rope_head_dim=64)
    outs = [("q", np.float16), ("k", np.float16)]
    model = build("QKNormRotaryEmbedding", "com.microsoft", inputs, attrs, outs)
    one = session(model, 1).run(None, feeds(inputs))
    four = session(model, 4).run(None, feeds(inputs))
    want = ropekit.qknorm_rotary_embedding(*[a for _, a in inputs], **attrs)
    for a, b, w in zip(one, four, want):
        same_bits(a, b)
        same_bits(a, w)


def test_sessions_concurrently_from_threads():
    rng = np.random.default_rng(22)
    jobs = []
    for i in range(4):
        dt = [np.float32, np.float16, BF16, np.float32][i]
        if i % 2 == 0:
            inputs = qknorm_inputs(rng, dt, 2, 40, 4, 128, 64)
            attrs = dict(num_heads=4, head_dim=128, rope_head_dim=64)
            model = build("QKNormRotaryEmbedding", "com.microsoft", inputs, attrs, [("q", dt), ("k", dt)])
            want = ropekit.qknorm_rotary_embedding(*[a for _, a in inputs], **attrs)
        else:
            c, s = tables(rng, 300, 64)
            inputs = [("input", rand(rng, (300, 8 * 128), dt)), ("cos", c), ("sin", s)]
            attrs = dict(num_heads=8, head_dim=128, rope_head_dim=64, num_groups=4)
            model = build("InverseRotaryRegroup", "ai.ropekit", inputs, attrs, [("y", dt)])
            want = [ropekit.inverse_rotary_regroup(*[a for _, a in inputs], **attrs)]
        jobs.append((session(model, threads=2), feeds(inputs), [np.asarray(w).astype(np.float32) for w in want]))
    errors = []

    def work(sess, fd, want):
        try:
            for _ in range(15):
                for g, w in zip(sess.run(None, fd), want):
                    same_bits(np.asarray(g, np.float32), w)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=j) for j in jobs for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# ---- the com.microsoft domain next to onnxruntime's own contrib operators --------------------------


def test_builtin_contrib_ops_still_run():
    """A custom domain named com.microsoft is accepted; onnxruntime's built-in com.microsoft
    operators (here its RotaryEmbedding) keep their own kernels in the same model."""
    rng = np.random.default_rng(31)
    B, S, N, H = 1, 3, 2, 8
    x = rand(rng, (B, S, N * H), np.float32)
    c, s = oracle.rand_tables(rng, 6, H // 2, np.float32)
    pos = np.array([[0, 1, 2]], np.int64)
    nodes = [helper.make_node("RotaryEmbedding", ["x", "pos", "c", "s"], ["y"], domain="com.microsoft", num_heads=N)]
    ins = [helper.make_tensor_value_info("x", TP.FLOAT, [B, S, N * H]),
           helper.make_tensor_value_info("pos", TP.INT64, [B, S]),
           helper.make_tensor_value_info("c", TP.FLOAT, [6, H // 2]),
           helper.make_tensor_value_info("s", TP.FLOAT, [6, H // 2])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    fd = {"x": x, "pos": pos, "c": c, "s": s}
    plain = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, fd)[0]
    with_lib = session(m.SerializeToString()).run(None, fd)[0]
    same_bits(with_lib, plain)
    y64, _ = oracle.ms_rope(x, pos, c, s, num_heads=N)
    assert np.max(np.abs(plain - y64)) < 1e-5


def test_library_path(monkeypatch, tmp_path):
    assert LIB.endswith("libropekit_ort.so")
    monkeypatch.setenv("ROPEKIT_ORT_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="missing.so"):
        ropekit.ort_custom_ops_library()


def test_com_microsoft_accepts_what_onnxruntime_accepts():
    """onnxruntime's contrib kernels check only element counts of kv_norm_weight and the tables
    (and ignore the tables at rope_head_dim 0): the com.microsoft ops accept that, ai.ropekit
    keeps ropekit's exact shapes."""
    rng = np.random.default_rng(41)
    B, S, nh, hd, rd = 1, 3, 2, 64, 0
    base = qknorm_inputs(rng, np.float32, B, S, nh, hd, 16)
    attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=16, simulate_fp8=0)
    want = ropekit.qknorm_rotary_embedding(*[a for _, a in base], **attrs)
    odd = [base[0], base[1], ("kv_norm_weight", base[2][1].reshape(1, hd)),
           ("cos", base[3][1].reshape(B * S, 16)), ("sin", base[4][1].reshape(B * S, 16))]
    outs = [("q", np.float32), ("k", np.float32)]
    got = run("QKNormRotaryEmbedding", "com.microsoft", odd, attrs, outs)
    for g, w in zip(got, want):
        same_bits(g, w)
    expect_error("QKNormRotaryEmbedding", "ai.ropekit", odd, attrs, outs, "kv_norm_weight")
    # rope_head_dim 0: tables of any shape are not read
    attrs0 = dict(num_heads=nh, head_dim=hd, rope_head_dim=rd)
    junk = [base[0], base[1], base[2], ("cos", np.zeros(5, np.float32)), ("sin", np.zeros(5, np.float32))]
    got = run("QKNormRotaryEmbedding", "com.microsoft", junk, attrs0, outs)
    want = ropekit.qknorm_rotary_embedding(base[0][1], base[1][1], base[2][1], **attrs0)
    for g, w in zip(got, want):
        same_bits(g, w)
    c, s = tables(rng, 4, 8)
    x = rand(rng, (4, 32), np.float32)
    rattrs = dict(num_heads=2, head_dim=16, rope_head_dim=8, num_groups=2)
    (y,) = run("InverseRotaryRegroup", "com.microsoft", [("input", x), ("cos", c.reshape(1, 4, 8)),
               ("sin", s.reshape(2, 16))], rattrs, [("y", np.float32)])
    same_bits(y, ropekit.inverse_rotary_regroup(x, c, s, **rattrs))


def test_env_registers_only_ai_ropekit(monkeypatch):
    """ROPEKIT_ORT_COM_MICROSOFT=0: only the ai.ropekit domain (for models that do not import
    com.microsoft: while a custom com.microsoft domain is registered, onnxruntime's optimizer
    cannot add its contrib nodes to them). A model that does not import com.microsoft and whose
    MatMuls onnxruntime fuses then loads next to the library."""
    import pathlib
    fixture = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "deepseek_v4" / "dsv4_tiny_f32.onnx"
    monkeypatch.setenv("ROPEKIT_ORT_COM_MICROSOFT", "0")
    sess = session(fixture.read_bytes())
    ids = np.zeros((1, 3), np.int64)
    plain = ort.InferenceSession(str(fixture), providers=["CPUExecutionProvider"])
    same_bits(sess.run(None, {"input_ids": ids})[0], plain.run(None, {"input_ids": ids})[0])
    rng = np.random.default_rng(51)
    c, s = tables(rng, 4, 8)
    inputs = [("input", rand(rng, (4, 32), np.float32)), ("cos", c), ("sin", s)]
    attrs = dict(num_heads=2, head_dim=16, rope_head_dim=8)
    (y,) = run("InverseRotaryRegroup", "ai.ropekit", inputs, attrs, [("y", np.float32)])
    same_bits(y, ropekit.inverse_rotary_regroup(*[a for _, a in inputs], **attrs))
    with pytest.raises(Exception):  # com.microsoft.InverseRotaryRegroup is then not registered
        run("InverseRotaryRegroup", "com.microsoft", inputs, attrs, [("y", np.float32)])
