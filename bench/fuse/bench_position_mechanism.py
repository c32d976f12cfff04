#!/usr/bin/env python3
"""Cost of the position mechanism of a fused model in onnxruntime (issue 11, item 3): the
original vs `ropekit fuse` with per-call rows (the default: the graph's own cos/sin rows for the
call, gathered with an identity index) vs a fixed table (`--max-positions N`), at prefill and
decode. A benchmark program, not a test; results go to bench/results-fuse.md.

    python bench/fuse/bench_position_mechanism.py --cli build/ropekit --work /tmp/pm \
        [--full-layers 28] [--full-vocab 32000] [--full-threads 8] [--json OUT]

Models:
  * `full`: the synthetic full-size Qwen3 of make_synthetic_qwen3.py (hidden 1024, 28 layers,
    16/8 heads, head_dim 128; no KV cache, so its "decode" is a one-token forward pass), built
    into WORK/full unless there; prefill B=1 S=512 at positions 0..511, decode S=1 at 512;
    its fuse time (wall clock of the CLI process, per-call rows and fixed table) is recorded too.
  * the matrix fixtures qwen3__dyn_o18_f32 (tiny, no past: prefill S=64, decode S=1 at 64) and
    qwen3__dyn_o18_f32_kv (tiny, past key/values: prefill S=64 with no past, decode S=1 after a
    past of 511 at position 511), from --fixtures (default tests/fixtures/matrix).
Sessions: CPUExecutionProvider, ORT_ENABLE_ALL, sequential, inter_op 1, intra_op --threads
(--full-threads for the full-size model). The three sessions of a model run round-robin on the
same inputs (1 check run whose outputs are compared, 2 warm-ups, then n rounds); figures are the
median and the minimum per session.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

HERE = pathlib.Path(__file__).resolve().parent
ort.set_default_logger_severity(3)


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def fuse(cli, src, dst, *extra):
    t0 = time.perf_counter()
    res = subprocess.run([str(cli), "fuse", str(src), str(dst), "--json", *extra],
                         capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"ropekit fuse {src} {extra}: rc {res.returncode}: {res.stderr[-500:]}")
    r = json.loads(res.stdout)
    return {"wall_s": wall, "found": r["sites_found"], "fused": r["sites_fused"],
            "nodes": [r["nodes_before"], r["nodes_after"]], "mode": r.get("mode")}


def session(path, threads):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feeds(sess, B, S, P, base, vocab, rng):
    out = {}
    for i in sess.get_inputs():
        dims = [B if d == "batch" else S if d == "sequence" else P if d == "past_sequence" else d
                for d in i.shape]
        if i.name == "input_ids":
            out[i.name] = rng.integers(0, vocab, dims).astype(np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.broadcast_to(np.arange(S) + base, dims).astype(np.int64)
        elif i.name == "attention_mask":
            out[i.name] = np.ones(dims, np.int64)
        elif i.type == "tensor(float)":
            out[i.name] = rng.standard_normal(dims).astype(np.float32)
        else:
            raise AssertionError(f"unexpected input {i.name} {i.type} {i.shape}")
    return out


def rel(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30))


def bench(sessions, fd, rounds, min_s):
    ys = [s.run(None, fd)[0] for s in sessions]
    diffs = [rel(ys[0], y) for y in ys[1:]]
    for _ in range(2):
        for s in sessions:
            s.run(None, fd)
    times = [[] for _ in sessions]
    t_end = time.perf_counter() + min_s
    while len(times[0]) < rounds or time.perf_counter() < t_end:
        for s, acc in zip(sessions, times):
            t0 = time.perf_counter()
            s.run(None, fd)
            acc.append(time.perf_counter() - t0)
        if len(times[0]) >= 5000:
            break
    return [{"median_ms": statistics.median(t) * 1e3, "min_ms": min(t) * 1e3, "n": len(t)}
            for t in times], diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", default=str(HERE.parents[1] / "tests" / "fixtures" / "matrix"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--full-threads", type=int, default=8)
    ap.add_argument("--full-layers", type=int, default=28)
    ap.add_argument("--full-vocab", type=int, default=32000)
    ap.add_argument("--no-full", action="store_true")
    ap.add_argument("--full-rounds", type=int, default=5)
    ap.add_argument("--decode-rounds", type=int, default=30,
                    help="at least this many decode rounds per session (default 30)")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "cpu": cpu_model(), "cores": os.cpu_count(), "onnxruntime": ort.__version__,
           "numpy": np.__version__, "python": sys.version.split()[0], "models": []}
    print(json.dumps({k: res[k] for k in ("date", "cpu", "cores", "onnxruntime")}), flush=True)
    fx = pathlib.Path(a.fixtures)
    models = []
    if not a.no_full:
        full = work / "full"
        if not (full / "model.onnx.data").exists():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, str(HERE / "make_synthetic_qwen3.py"), "--out", str(full),
                            "--layers", str(a.full_layers), "--vocab", str(a.full_vocab)], check=True)
            print(f"built the full-size model in {time.perf_counter() - t0:.1f} s", flush=True)
        models.append(("synthetic Qwen3 full size", full / "model.onnx", a.full_vocab, a.full_threads,
                       [("prefill", 1, 512, 0, 0), ("decode", 1, 1, 0, 512)], a.full_rounds, 0.0))
    models.append(("qwen3__dyn_o18_f32 (tiny)", fx / "qwen3__dyn_o18_f32.onnx", 32, a.threads,
                   [("prefill", 1, 64, 0, 0), ("decode", 1, 1, 0, 64)], 200, 1.0))
    models.append(("qwen3__dyn_o18_f32_kv (tiny, past)", fx / "qwen3__dyn_o18_f32_kv.onnx", 32, a.threads,
                   [("prefill", 1, 64, 0, 0), ("decode", 1, 1, 511, 511)], 200, 1.0))
    for label, src, vocab, threads, phases, rounds, min_s in models:
        d = work / ("fused_" + src.parent.name + "_" + src.stem)
        d.mkdir(exist_ok=True)
        rows_p, table_p = d / "rows.onnx", d / "table.onnx"
        m = {"model": label, "threads": threads,
             "fuse_rows": fuse(a.cli, src, rows_p),
             "fuse_table": fuse(a.cli, src, table_p, "--max-positions", "40960")}
        if label.startswith("synthetic"):  # fuse time: 3 more runs each, fresh processes
            m["fuse_rows_s"] = [m["fuse_rows"]["wall_s"]] + [fuse(a.cli, src, rows_p)["wall_s"] for _ in range(2)]
            m["fuse_table_s"] = [m["fuse_table"]["wall_s"]] + [
                fuse(a.cli, src, table_p, "--max-positions", "40960")["wall_s"] for _ in range(2)]
        t0 = time.perf_counter()
        sess = [session(p, threads) for p in (src, rows_p, table_p)]
        m["load_s"] = time.perf_counter() - t0
        m["phases"] = []
        for phase, B, S, P, base in phases:
            fd = feeds(sess[0], B, S, P, base, vocab, np.random.default_rng(7))
            t, diffs = bench(sess, fd, rounds if phase == "prefill" else max(rounds, a.decode_rounds), min_s)
            row = {"phase": phase, "B": B, "S": S, "P": P, "base": base, "original": t[0],
                   "rows": t[1], "table": t[2], "diff_rows": diffs[0], "diff_table": diffs[1]}
            m["phases"].append(row)
            print(json.dumps({"model": label, **row}), flush=True)
        res["models"].append(m)
        del sess
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
