"""Fuse the RoPE subgraphs of an ONNX model from Python, then run the original and the fused
model in onnxruntime on the same inputs and compare.

    python examples/fuse_and_run.py [MODEL.onnx]   (default: the tiny Qwen3 fixture)

Needs: pip install ropekit onnxruntime."""

import pathlib
import sys
import tempfile

import numpy as np
import onnxruntime as ort

import ropekit

ROOT = pathlib.Path(__file__).resolve().parents[1]
src = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "models" / "qwen3.onnx"

with tempfile.TemporaryDirectory() as tmp:
    dst = pathlib.Path(tmp) / "fused.onnx"
    report = ropekit.fuse(src, dst)  # the table length comes from the config.json next to src
    print(report.text, end="")
    print(f"fused nodes in {dst.name}:",
          sorted({(n["domain"], n["op_type"]) for n in ropekit.inspect(dst)["rotary_nodes"]}))

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    original = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(str(dst), so, providers=["CPUExecutionProvider"])

    B, S = 2, 12
    rng = np.random.default_rng(0)
    feeds = {}
    for i in original.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 128, (B, S)).astype(np.int64)
        elif i.name == "position_ids":
            p = np.tile(np.arange(S, dtype=np.int64), (B, 1))
            feeds[i.name] = np.stack([p, p, p]) if len(i.shape) == 3 else p
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((B, S), np.int64)
        else:
            sys.exit(f"don't know how to feed input {i.name!r}")
    a = original.run(None, feeds)[0]
    b = fused.run(None, feeds)[0]
    err = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
    print(f"logits {a.shape}: max |original - fused| = {err:.3g}")
    if not (a.shape == b.shape and err < 1e-3):
        sys.exit("FAILED: the fused model does not compute what the original computes")
    print("ok")
