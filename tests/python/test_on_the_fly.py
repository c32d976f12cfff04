"""rotary_embedding_on_the_fly: the angles of each token computed instead of read from a table
must give exactly what a float32 'accurate' table gives, for every dtype and layout."""

import numpy as np
import pytest

import ropekit
from oracle import BF16 as bf16


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_on_the_fly_equals_an_accurate_float32_table(dtype, interleaved):
    dt = bf16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(7)
    inv, af = ropekit.rope_inv_freq("yarn", rotary_dim=32, rope_theta=1e6, factor=4.0,
                                    original_max_position_embeddings=4096)
    x = rng.standard_normal((2, 3, 5, 40)).astype(dt)  # rank 4, head 40, rotary 32
    pos = rng.integers(0, 20000, (2, 5))
    cos, sin = ropekit.rope_cos_sin_table(inv, 20000, attention_factor=af, mode="accurate")
    want = ropekit.rotary_embedding(x, cos, sin, pos, rotary_embedding_dim=32, interleaved=interleaved)
    got = ropekit.rotary_embedding_on_the_fly(x, inv, pos, attention_factor=af, rotary_embedding_dim=32,
                                              interleaved=interleaved)
    assert got.dtype == x.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_on_the_fly_errors():
    x = np.zeros((1, 2, 16), np.float32)
    inv = np.ones(8, np.float32)
    with pytest.raises(ropekit.Error, match="inv_freq_len = 4"):
        ropekit.rotary_embedding_on_the_fly(x, inv[:4], np.zeros((1, 2), np.int64), num_heads=1)
    with pytest.raises(ropekit.Error, match="2\\^53"):
        ropekit.rotary_embedding_on_the_fly(x, inv, np.array([[0, 2**60]]), num_heads=1)
