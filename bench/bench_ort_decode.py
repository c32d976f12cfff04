"""The decode rows of bench_ort.py, ORT and ropekit side by side in this process, with the bits.

    python3 bench/bench_ort_decode.py [--models DIR] [--time SECONDS] [--offset B]
    (ROPEKIT_ROOT: the checkout whose bench/bench_ort.py and python/ to use, default this one's)

For decode B=1 32x128 and B=64 40x128 (float32, float16): bench_ort.time_ort (ORT's CPU
RotaryEmbedding, opset 23, one node, IOBinding with a preallocated output, intra_op_num_threads
= 1, inter_op = 1, no spinning; ropekit's C function on the same arrays in alternated batches,
ROPEKIT_LIB), then one run of each on the same inputs compared bit for bit (how many outputs
differ and by how many ulps: ropekit computes ref.c's exact double products, so a difference is
ORT's float arithmetic), and ORT's own thread count while it runs (threads of this process). """
from __future__ import annotations

import argparse
import ctypes
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(os.environ.get("ROPEKIT_ROOT") or pathlib.Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT / "bench"))
import bench_ort  # noqa: E402

ort = bench_ort.ort


def bits_diff(a: np.ndarray, b: np.ndarray) -> str:
    it = np.int32 if a.dtype == np.float32 else np.int16
    ia, ib = a.view(it).astype(np.int64), b.view(it).astype(np.int64)
    d = np.abs(ia - ib)
    n = int(np.count_nonzero(d))
    return f"{n} of {d.size} outputs differ ({100.0 * n / d.size:.2f}%), max {int(d.max())} ulp"


def compare(B, S, N, H, dtype) -> str:
    R, P = H, max(S, 4096)
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (B, S, N * H)).astype(dtype)
    ang = rng.uniform(0, 6.28, (P, R // 2))
    cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    pos = rng.integers(0, P, (B, S), dtype=np.int64)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(bench_ort.rotary_model(B, S, N, H, R, P, dtype), so,
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "cos": cos, "sin": sin, "pos": pos})[0]
    threads = len(os.listdir("/proc/self/task"))
    rk = bench_ort._ropekit_module()
    got = rk.rotary_embedding(x, cos, sin, pos, num_heads=N, rotary_embedding_dim=R)
    return f"ropekit vs ORT bits: {bits_diff(got, want)}; threads in this process: {threads}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=None)
    ap.add_argument("--time", type=float, default=1.0)
    ap.add_argument("--offset", type=int, default=0)
    a = ap.parse_args()
    bench_ort.MODEL_DIR = a.models
    bench_ort.ARRAY_OFFSET = a.offset
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}; ROPEKIT_LIB="
          f"{os.environ.get('ROPEKIT_LIB')}; arrays +{a.offset} B")
    for B, N in ((1, 32), (64, 40)):
        for dt in (np.float32, np.float16):
            o, r = bench_ort.time_ort(B, 1, N, 128, 128, dt, 1, a.time, side=True)
            name = f"decode B={B} {N}x128 {np.dtype(dt).name}"
            print(f"{name:28s} ORT {o * 1e6:9.2f} us  ropekit {r * 1e6:9.2f} us  "
                  f"ORT/ropekit {o / r:5.2f}x   {compare(B, 1, N, 128, dt)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
