"""Hostile models and feeds for libropekit_ort: every one must end in a clean onnxruntime error
(at session creation or at run) or a correct result — never a crash, a hang, a huge allocation or
a silently wrong attribute. Run-time errors carry ropekit's message, prefixed with the node."""

import numpy as np
import onnxruntime as ort
import pytest
import ropekit
from onnx import helper

ort.set_default_logger_severity(4)
LIB = ropekit.ort_custom_ops_library()
F = np.float32


def _model(op, domain, inputs, attrs, nout):
    vis, names = [], []
    for n, a in inputs:
        vis.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                 [f"{n}{i}" for i in range(a.ndim)]))
        names.append(n)
    outs = [f"o{i}" for i in range(nout)]
    node = helper.make_node(op, names, outs, domain=domain, name="n", **attrs)
    g = helper.make_graph([node], "g", vis, [helper.make_empty_tensor_value_info(o) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    m.ir_version = 10
    return m.SerializeToString()


def _session(model):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.register_custom_ops_library(LIB)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def outcome(op, domain, inputs, attrs, nout=1):
    """('session', msg) | ('run', msg) | ('ok', outputs)."""
    try:
        sess = _session(_model(op, domain, inputs, attrs, nout))
    except Exception as e:
        return "session", str(e)
    try:
        return "ok", sess.run(None, dict(inputs))
    except Exception as e:
        return "run", str(e)


X = np.ones((1, 2, 16), F)
C = np.ones((4, 4), F)
P = np.zeros((1, 2), np.int64)


def ms(x=X, p=P, c=C, s=C, **attrs):
    return [("x", x), ("p", p), ("c", c), ("s", s)], dict({"num_heads": 2}, **attrs)


RUN_ERRORS = {  # (inputs, attrs) of ai.ropekit.MsRotaryEmbedding -> words of the message
    "scalar ids": (ms(p=np.array(0, np.int64)), "position_ids has rank 0"),
    "rank 9 input": (ms(x=np.ones((1,) * 8 + (16,), F)), "input has rank 9"),
    "rank 2 input": (ms(x=np.ones((2, 16), F)), "rank must be 3"),
    "no cache rows": (ms(c=np.ones((0, 4), F), s=np.ones((0, 4), F)), "rows [0, 0)"),
    "offset int64 max": (ms(p=np.array([2**63 - 1], np.int64)), "9223372036854775807"),
    "offset -1": (ms(p=np.array([-1], np.int64)), "position offset -1"),
    "id int64 min": (ms(p=np.array([[-2**63, 0]], np.int64)), "-9223372036854775808"),
    "ids (B,S,1)": (ms(p=np.zeros((1, 2, 1), np.int64)), "position_ids: shape (1, 2, 1)"),
    "ids wrong batch": (ms(p=np.zeros((2, 2), np.int64)), "position_ids: shape (2, 2)"),
    "num_heads 2^62": (ms(num_heads=2**62), "not a multiple of num_heads"),
    "num_heads -2": (ms(num_heads=-2), "num_heads = -2"),
    "rotary dim -8": (ms(rotary_embedding_dim=-8), "rotary_embedding_dim = -8"),
    "rotary dim 2^62": (ms(rotary_embedding_dim=2**62), "exceeds the head size"),
    "interleaved 2": (ms(interleaved=2), "interleaved = 2"),
    "scale nan": (ms(scale=float("nan")), "scale is not finite"),
    "sin other shape": (ms(s=np.ones((5, 4), F)), "sin_cache: shape (5, 4)"),
}


@pytest.mark.parametrize("name", list(RUN_ERRORS))
def test_ms_rotary_bad_inputs_are_clean_errors(name):
    case, words = RUN_ERRORS[name]
    inputs, attrs = case
    kind, msg = outcome("MsRotaryEmbedding", "ai.ropekit", inputs, attrs)
    assert kind == "run", (kind, msg)
    assert "ai.ropekit.MsRotaryEmbedding node 'n'" in msg and "ROPEKIT_ERROR" in msg, msg
    assert words in msg, msg


def test_wrong_arity_and_types_are_refused_at_session_creation():
    for inputs, words in [
        ([("x", X), ("p", P), ("c", C)], "input size 3"),
        ([("x", X), ("p", P.astype(np.int32)), ("c", C), ("s", C)], "tensor(int32)"),
        ([("x", X.astype(np.float64)), ("p", P), ("c", C.astype(np.float64)), ("s", C.astype(np.float64))],
         "tensor(double)"),
        ([("x", X.astype(np.float16)), ("p", P), ("c", C.astype(np.float16)), ("s", C)], "no kernel def"),
    ]:
        kind, msg = outcome("MsRotaryEmbedding", "ai.ropekit", inputs, {"num_heads": 2})
        assert kind == "session" and words in msg, (kind, msg)


@pytest.mark.parametrize("op,attrs,words", [
    ("MsRotaryEmbedding", dict(num_heads=2, interleaved=1.0), "attribute interleaved must be an int"),
    ("MsRotaryEmbedding", dict(num_heads="2"), "attribute num_heads must be an int"),
    ("MsRotaryEmbedding", dict(num_heads=2, scale=1), "attribute scale must be a float"),
    ("MsRotaryEmbedding", dict(num_heads=2, rotary_embedding_dim=[8]), "attribute rotary_embedding_dim must be an int"),
    ("RotaryEmbedding", dict(num_heads=2, interleaved=1.0), "attribute interleaved must be an int"),
    ("RotaryEmbedding", dict(num_heads=2, inverse=1.0), "attribute inverse must be an int"),
])
def test_attribute_of_the_wrong_type_is_an_error_not_the_default(op, attrs, words):
    """A float `interleaved = 1.0` was read as absent: the op ran with interleaved = 0."""
    inputs = ms()[0] if op == "MsRotaryEmbedding" else [("x", X), ("c", C), ("s", C), ("p", P)]
    kind, msg = outcome(op, "ai.ropekit", inputs, attrs)
    assert kind == "session", (kind, msg if kind != "ok" else "ran")
    assert words in msg and f"ai.ropekit.{op} node 'n'" in msg, msg


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
def test_qknorm_attribute_types(domain):
    q, kv, w, t = np.ones((1, 2, 128), F), np.ones((1, 2, 64), F), np.ones(64, F), np.ones((1, 2, 16), F)
    inputs = [("q", q), ("kv", kv), ("w", w), ("c", t), ("s", t)]
    base = dict(num_heads=2, head_dim=64, rope_head_dim=16, simulate_fp8=0)
    for bad, words in [(dict(epsilon=0), "attribute epsilon must be a float"),
                       (dict(simulate_fp8=1.0), "attribute simulate_fp8 must be an int"),
                       (dict(head_dim=64.0), "attribute head_dim must be an int")]:
        kind, msg = outcome("QKNormRotaryEmbedding", domain, inputs, dict(base, **bad), 2)
        assert kind == "session" and words in msg, (kind, msg if kind != "ok" else "ran")
    kind, msg = outcome("MRotaryEmbedding", "ai.ropekit",
                        [("x", X), ("p", np.zeros((3, 1, 2), np.int64)), ("c", C), ("s", C)],
                        dict(num_heads=2, mrope_section=[2.0, 1.0, 1.0]))
    assert kind == "session" and "mrope_section must have 3 values" in msg, (kind, msg)


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
@pytest.mark.parametrize("nh,hd,words", [(2**40, 2**40, "overflows int64"),
                                         (2**15, 2**16, "query has 128 channels per token")])
def test_qknorm_attributes_checked_before_outputs_are_allocated(domain, nh, hd, words):
    """num_heads*head_dim that overflows, or that the query does not have: ropekit's error, before
    onnxruntime is asked for a query_out of B*S*num_heads*head_dim elements (16 GiB here)."""
    q, kv, w, t = np.ones((1, 2, 128), F), np.ones((1, 2, 64), F), np.ones(64, F), np.ones((1, 2, 16), F)
    kind, msg = outcome("QKNormRotaryEmbedding", domain, [("q", q), ("kv", kv), ("w", w), ("c", t), ("s", t)],
                        dict(num_heads=nh, head_dim=hd, rope_head_dim=16, simulate_fp8=0), 2)
    assert kind == "run" and words in msg and f"{domain}.QKNormRotaryEmbedding node 'n'" in msg, (kind, msg)


@pytest.mark.parametrize("domain", ["com.microsoft", "ai.ropekit"])
def test_empty_tensors_give_empty_outputs(domain):
    q, kv, w, t = np.ones((1, 0, 128), F), np.ones((1, 0, 64), F), np.ones(64, F), np.ones((1, 0, 16), F)
    kind, got = outcome("QKNormRotaryEmbedding", domain, [("q", q), ("kv", kv), ("w", w), ("c", t), ("s", t)],
                        dict(num_heads=2, head_dim=64, rope_head_dim=16, simulate_fp8=0), 2)
    assert kind == "ok" and [g.shape for g in got] == [(1, 0, 2, 64), (1, 0, 64)], got
    kind, got = outcome("InverseRotaryRegroup", domain,
                        [("x", np.ones((0, 32), F)), ("c", np.ones((0, 8), F)), ("s", np.ones((0, 8), F))],
                        dict(num_heads=2, head_dim=16, rope_head_dim=8, num_groups=2))
    assert kind == "ok" and got[0].shape == (2, 0, 16), got
    for x, p in [(np.ones((0, 2, 16), F), np.zeros((0, 2), np.int64)), (np.ones((1, 0, 16), F), np.zeros(1, np.int64)),
                 (np.ones((0, 0, 16), F), np.zeros((0, 0), np.int64))]:
        kind, got = outcome("MsRotaryEmbedding", "ai.ropekit", *ms(x=x, p=p))
        assert kind == "ok" and got[0].shape == x.shape, got


def test_non_finite_values_propagate():
    x = np.full((1, 2, 16), np.nan, F)
    c = np.full((4, 4), np.inf, F)
    kind, got = outcome("MsRotaryEmbedding", "ai.ropekit", *ms(x=x, c=c))
    assert kind == "ok" and np.isnan(got[0]).all()
