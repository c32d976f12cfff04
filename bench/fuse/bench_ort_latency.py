#!/usr/bin/env python3
"""onnxruntime CPU latency, original vs `ropekit fuse`d, for every dynamo fixture in
tests/fixtures/models (fused with the CLI into $ROPEKIT_BENCH_DIR/fixtures/) and the synthetic
full-size Qwen3 ($ROPEKIT_BENCH_DIR/qwen3_full/, fused by bench_fuse_cli.py or here).

Settings: CPUExecutionProvider, graph_optimization_level ORT_ENABLE_ALL, intra_op_num_threads 1 and
2, inter_op_num_threads 1, sequential execution. Shapes: prefill B=1, S=64 (fixtures) / S=512
(full-size), positions 0..S-1; decode B=1, S=1 at position S (the models have no KV cache:
use_cache=False, so "decode" is a one-token forward pass). Both sessions are loaded, warmed up,
then run alternately (original, fused, original, ...) with the same inputs; each figure is the
median over the repeats (the minimum is kept too). The first outputs of each pair are compared (max|diff|/max|orig|).
The 1-minute load average is recorded for each row.

    .venv/bin/python bench/fuse/bench_ort_latency.py [--only NAME ...] [--no-full] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import numpy as np

from common import FULL, MODELS, WORK, feeds_for, fixture_info, fixtures, fuse_cli, load, rel_diff, session


def bench_pair(orig, fused, threads, B, S, base, vocab, reps, min_time):
    a, b = session(orig, threads), session(fused, threads)
    rng = np.random.default_rng(7)
    f = feeds_for(a, B, S, base, rng, vocab)
    ya, yb = a.run(None, f)[0], b.run(None, f)[0]
    diff = rel_diff(ya, yb)
    for _ in range(2):
        a.run(None, f), b.run(None, f)
    ta, tb = [], []
    t_end = time.perf_counter() + min_time
    ld = load()
    while len(ta) < reps or time.perf_counter() < t_end:
        for sess, acc in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            sess.run(None, f)
            acc.append(time.perf_counter() - t0)
        if len(ta) >= 2000:
            break
    ld = max(ld, load())
    return statistics.median(ta), statistics.median(tb), len(ta), diff, ld, min(ta), min(tb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--no-full", action="store_true")
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--full-reps", type=int, default=9, help="prefill repeats for the full-size model")
    ap.add_argument("--json")
    a = ap.parse_args()
    outdir = WORK / "fixtures"
    outdir.mkdir(parents=True, exist_ok=True)
    models = []
    for name in a.only or fixtures("dynamo"):
        if name == "qwen3_full":
            continue
        dst = outdir / f"{name}_fused.onnx"
        rep = fuse_cli(MODELS / f"{name}.onnx", dst)
        vocab = fixture_info(name)["config"].get("vocab_size", 128)
        models.append((name, MODELS / f"{name}.onnx", dst, 64, vocab, rep["sites_fused"], 20, 1.0))
    if not a.no_full and (not a.only or "qwen3_full" in a.only):
        src, dst = FULL / "model.onnx", FULL / "model_fused.onnx"
        rep = fuse_cli(src, dst)
        models.append(("qwen3_full", src, dst, 512, 32000, rep["sites_fused"], a.full_reps, 0.0))
    rows = []
    for name, src, dst, S, vocab, nf, reps, mt in models:
        for threads in a.threads:
            for phase, (S_, base) in (("prefill", (S, 0)), ("decode", (1, S))):
                r = reps if phase == "prefill" else max(reps, 30)
                to, tf, n, diff, ld, mo, mf = bench_pair(src, dst, threads, 1, S_, base, vocab, r, mt)
                row = {"model": name, "fused_sites": nf, "threads": threads, "phase": phase, "S": S_,
                       "orig_ms": to * 1e3, "fused_ms": tf * 1e3, "speedup": to / tf, "n": n,
                       "orig_min_ms": mo * 1e3, "fused_min_ms": mf * 1e3,
                       "rel_diff": diff, "load1": ld}
                rows.append(row)
                print(f"{name:16s} t={threads} {phase:7s} S={S_:<4d} orig {to * 1e3:9.3f} ms  fused "
                      f"{tf * 1e3:9.3f} ms  x{to / tf:5.2f}  (min {mo * 1e3:.3f} / {mf * 1e3:.3f})  n={n:<5d} diff {diff:.2g}  load {ld:.2f}",
                      flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
