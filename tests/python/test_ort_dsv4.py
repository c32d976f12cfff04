"""`ropekit fuse` on DeepSeek-V4 attention, run by libropekit_ort: tiny random-weight exports
(tests/fixtures/deepseek_v4/, made by bench/dsv4/make_dsv4_model.py --size tiny, float32 and
float16) fused into com.microsoft (or ai.ropekit) QKNormRotaryEmbedding + InverseRotaryRegroup
and compared with the original model in onnxruntime at several lengths; a graph whose rounding
differs from the operator's contract is refused with that reason."""

import json
import os
import pathlib
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import ropekit
from onnx import TensorProto as TP
from onnx import helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("ROPEKIT_CLI", ROOT / "build" / "ropekit"))
FIX = ROOT / "tests" / "fixtures" / "deepseek_v4"
LENGTHS = [1, 2, 7, 33, 100]


def fuse(src, dst, *extra):
    res = subprocess.run([str(CLI), "fuse", str(src), str(dst), "--json", *extra], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def session(path, lib=False):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if lib:
        so.register_custom_ops_library(ropekit.ort_custom_ops_library())
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def logits(sess, S):
    ids = np.random.default_rng(S).integers(0, 128, (1, S)).astype(np.int64)
    return np.asarray(sess.run(None, {"input_ids": ids})[0], np.float32)


@pytest.mark.parametrize("target,domain", [("ort", "com.microsoft"), ("ropekit", "ai.ropekit")])
def test_float32_fused_matches_original(tmp_path, target, domain):
    src, dst = FIX / "dsv4_tiny_f32.onnx", tmp_path / "fused.onnx"
    rep = fuse(src, dst, "--target", target)
    assert rep["attention_sites_found"] == 2 and rep["attention_sites_fused"] == 4  # 2 layers x 2 ops
    assert rep["requires"] == "libropekit_ort"
    m = onnx.load(str(dst))
    ops = sorted(n.op_type for n in m.graph.node if n.domain == domain)
    assert ops == ["InverseRotaryRegroup"] * 2 + ["QKNormRotaryEmbedding"] * 2
    assert not any(n.op_type in ("Neg", "Reciprocal") for n in m.graph.node if "self_attn" in n.name)
    assert {p.key: p.value for p in m.metadata_props}["ropekit.requires"].startswith("libropekit_ort")
    plain, fused = session(src), session(dst, lib=True)
    for S in LENGTHS:
        want, got = logits(plain, S), logits(fused, S)
        assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max()), S


def test_float16_fused_close_to_original(tmp_path):
    """float16: the graph's rounding points are the operator's (the numeric check passes), but
    onnxruntime's CPU EP runs float16 regions in float (inserted casts), so the original is not
    bit-exact to its own graph; the logits agree to about one float16 ulp."""
    src, dst = FIX / "dsv4_tiny_f16.onnx", tmp_path / "fused16.onnx"
    rep = fuse(src, dst)
    assert rep["attention_sites_fused"] == 4
    plain, fused = session(src), session(dst, lib=True)
    for S in LENGTHS:
        want, got = logits(plain, S), logits(fused, S)
        assert float(np.abs(got - want).max()) <= 2e-3 * float(np.abs(want).max()), S


def test_kv_rounded_before_weight_is_refused(tmp_path):
    """A graph that rounds the normalized kv to float16 before the weight multiply does not
    compute the operator's contract: the attention is left as it is, with that reason."""
    m = onnx.load(str(FIX / "dsv4_tiny_f32.onnx"))
    g = m.graph
    weights = {i.name for i in g.initializer if i.name.endswith("kv_norm.weight")}
    for n in list(g.node):
        if n.op_type == "Mul" and n.input[0] in weights:  # Mul(w, Mul(k, rsqrt))
            mid = n.input[1]
            g.node.extend([helper.make_node("Cast", [mid], [mid + "_h"], to=TP.FLOAT16),
                           helper.make_node("Cast", [mid + "_h"], [mid + "_r"], to=TP.FLOAT)])
            n.input[1] = mid + "_r"
    # keep the node list topologically sorted
    order, avail, pending = [], {i.name for i in g.input} | {i.name for i in g.initializer} | {""}, list(g.node)
    while pending:
        rest = [n for n in pending if not all(i in avail for i in n.input)]
        for n in pending:
            if n not in rest:
                order.append(n)
                avail.update(n.output)
        pending = rest
    del g.node[:]
    g.node.extend(order)
    src = tmp_path / "rounded.onnx"
    onnx.save(m, str(src))
    rep = fuse(src, tmp_path / "out.onnx")
    assert rep["attention_sites_found"] == 2 and rep["attention_sites_fused"] == 0
    text = subprocess.run([str(CLI), "fuse", str(src), str(tmp_path / "o2.onnx"), "--dry-run"],
                          capture_output=True, text=True).stdout
    assert "rounding points differ" in text and "kv" in text, text


def test_target_ropekit_on_a_rope_model(tmp_path):
    """--target ropekit also writes the plain RoPE sites as ai.ropekit.MsRotaryEmbedding (the
    com.microsoft input order, bounds-checked), run by libropekit_ort with parity."""
    src = ROOT / "tests" / "fixtures" / "models" / "qwen3.onnx"
    dst = tmp_path / "qwen3_rk.onnx"
    rep = fuse(src, dst, "--target", "ropekit", "--max-positions", "2048")  # a fixed table
    assert rep["sites_fused"] == 4 and rep["requires"] == "libropekit_ort"
    ops = {(n.domain, n.op_type) for n in onnx.load(str(dst)).graph.node if n.domain}
    assert ops == {("ai.ropekit", "MsRotaryEmbedding")}
    ids = np.arange(10).reshape(2, 5).astype(np.int64) % 50
    feeds = {"input_ids": ids, "position_ids": np.tile(np.arange(3, 8), (2, 1)).astype(np.int64)}
    want = session(src).run(None, feeds)[0]
    got = session(dst, lib=True).run(None, feeds)[0]
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())
    feeds["position_ids"][1, 2] = 5000  # past the 2048-row table: an error, not a read past it
    with pytest.raises(Exception, match="5000"):
        session(dst, lib=True).run(None, feeds)
