"""Every ONNX backend test case of RotaryEmbedding (collected from the installed onnx package:
the .pb data is not in the wheel, so the case generators are run) through ropekit."""


import numpy as np
import onnx
import pytest

import cases
import oracle
import ropekit


CASES = cases.onnx_backend_rotary_cases()
EXPECTED_NAMES = {
    "test_rotary_embedding", "test_rotary_embedding_3d_input", "test_rotary_embedding_interleaved",
    "test_rotary_embedding_with_rotary_dim", "test_rotary_embedding_with_interleaved_rotary_dim",
    "test_rotary_embedding_no_position_ids", "test_rotary_embedding_no_position_ids_interleaved",
    "test_rotary_embedding_no_position_ids_rotary_dim",
}


def test_collected_all_cases():
    assert len(CASES) >= 8, [c.name for c in CASES]
    assert EXPECTED_NAMES <= {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case(case):
    node = case.model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert set(attrs) <= {"interleaved", "rotary_embedding_dim", "num_heads"}
    (inputs, outputs), = case.data_sets
    x, cos, sin = inputs[:3]
    pos = inputs[3] if len(inputs) > 3 else None
    expected = outputs[0]
    y = ropekit.rotary_embedding(x, cos, sin, pos, **attrs)
    assert y.dtype == expected.dtype and y.shape == expected.shape
    scale = float(np.max(np.abs(expected)))
    diff = float(np.max(np.abs(y.astype(np.float64) - expected)))
    oracle.report(("onnx backend cases", "max abs diff / output scale"), diff / scale)
    assert diff <= 1e-6 * scale, (case.name, diff, scale)
    # tighter: ropekit is correctly rounded (<= 0.5 ulp of the exact result); the expected
    # outputs were rounded per op in float32 (<= 2 ulps at the scale of the larger product)
    ref, mag = oracle.onnx_rope(x, cos, sin, pos, **attrs)
    e_lib = oracle.ulp_err(y, ref, np.float32)
    e_exp = oracle.ulp_err(expected, ref, np.float32, scale=mag)
    oracle.report(("onnx backend cases", "ropekit ulp vs float64 oracle"), e_lib.max())
    oracle.report(("onnx backend cases", "expected-output ulp (term scale) vs float64 oracle"), e_exp.max())
    assert e_lib.max() <= 0.5 + 1e-6
    assert e_exp.max() <= 2.0 + 1e-6  # sanity of the oracle against onnx's own numbers
