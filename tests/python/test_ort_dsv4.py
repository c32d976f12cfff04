"""DeepSeek-V4 attention on libropekit_ort: the tiny random-weight export in
tests/fixtures/deepseek_v4/ (bench/dsv4/make_dsv4_model.py --size tiny) against itself with each
layer's q/kv norm + RoPE replaced by com.microsoft.QKNormRotaryEmbedding and the conjugate
rotation + group reshape by com.microsoft.InverseRotaryRegroup (dsv4_proto_fuse.py, a Python
prototype of the fusion, not `ropekit fuse`). float32 logits within 1e-5 of their scale."""

import pathlib

import dsv4_proto_fuse
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import ropekit

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "deepseek_v4" / "dsv4_tiny_f32.onnx"


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    fused = tmp_path_factory.mktemp("dsv4") / "fused.onnx"
    n_fused, _ = dsv4_proto_fuse.fuse(str(FIXTURE), str(fused), 4, 64, 16, 2, 1e-6)
    assert n_fused == 6  # 2 layers x (query, kv, inverse)
    ops = [n.op_type for n in onnx.load(str(fused)).graph.node if n.domain == "com.microsoft"]
    assert sorted(ops) == ["InverseRotaryRegroup"] * 2 + ["QKNormRotaryEmbedding"] * 2
    so = ort.SessionOptions()
    so.log_severity_level = 3
    plain = ort.InferenceSession(str(FIXTURE), so, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.register_custom_ops_library(ropekit.ort_custom_ops_library())
    return plain, ort.InferenceSession(str(fused), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("length", [1, 2, 7, 33, 100])
def test_dsv4_fused_matches_original(sessions, length):
    plain, fused = sessions
    ids = np.random.default_rng(length).integers(0, 128, (1, length)).astype(np.int64)
    want = plain.run(None, {"input_ids": ids})[0]
    got = fused.run(None, {"input_ids": ids})[0]
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= 1e-5 * scale
