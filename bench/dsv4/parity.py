"""Parity of two models on random input_ids (original vs fused): python parity.py ORIG FUSED LIBROPEKIT_ORT"""
import sys, time, numpy as np, onnxruntime as ort
lib = sys.argv[3]
so = ort.SessionOptions(); so.register_custom_ops_library(lib); so.intra_op_num_threads = 1
a = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"], sess_options=ort.SessionOptions())
b = ort.InferenceSession(sys.argv[2], so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
for S in (1, 2, 7, 33, 100):
    ids = rng.integers(0, 128, (1, S)).astype(np.int64)
    ya = a.run(None, {"input_ids": ids})[0]; yb = b.run(None, {"input_ids": ids})[0]
    print(S, "max|d| =", float(np.abs(ya - yb).max()), "scale", float(np.abs(ya).max()))
