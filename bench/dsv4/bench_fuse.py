"""onnxruntime CPU latency of a DeepSeek-V4 export, original vs fused (a benchmark, not a test):
python bench/dsv4/bench_fuse.py ORIG.onnx FUSED.onnx LIBROPEKIT_ORT [--threads N] [--lengths 1,128]
Prints a markdown table: median and min over repeated runs after warm-up, per input length."""
import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort


def session(path, threads, lib=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if lib:
        so.register_custom_ops_library(lib)
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def timeit(sess, feed, budget_s=3.0, min_runs=5):
    for _ in range(2):
        sess.run(None, feed)
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_runs or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t0)
        if len(times) >= 200:
            break
    return statistics.median(times) * 1e3, min(times) * 1e3, len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("orig")
    ap.add_argument("fused")
    ap.add_argument("lib")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lengths", default="1,128")
    a = ap.parse_args()
    orig, fused = session(a.orig, a.threads), session(a.fused, a.threads, a.lib)
    vocab = 1024
    print(f"onnxruntime {ort.__version__}, intra_op_num_threads {a.threads}\n")
    print("| input length | original median (min) ms | fused median (min) ms | fused / original |")
    print("|---:|---:|---:|---:|")
    for S in [int(x) for x in a.lengths.split(",")]:
        feed = {"input_ids": np.random.default_rng(S).integers(0, vocab, (1, S)).astype(np.int64)}
        mo, lo, _ = timeit(orig, feed)
        mf, lf, _ = timeit(fused, feed)
        print(f"| {S} | {mo:.3f} ({lo:.3f}) | {mf:.3f} ({lf:.3f}) | {mf / mo:.2f} |")


if __name__ == "__main__":
    main()
