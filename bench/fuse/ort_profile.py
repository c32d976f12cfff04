#!/usr/bin/env python3
"""Where the time goes: onnxruntime's built-in profiler (SessionOptions.enable_profiling) on the
full-size synthetic Qwen3, original vs fused, ORT_ENABLE_ALL, intra_op_num_threads 1, one warm-up
run then --runs profiled runs; kernel time summed per op type and divided by the run count.

    .venv/bin/python bench/fuse/ort_profile.py [--S 512] [--runs 3] [--threads 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib

import numpy as np
import onnxruntime as ort

from common import FULL, WORK, feeds_for, load


def profile(path, S, runs, threads):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = str(WORK / ("prof_" + pathlib.Path(path).stem))
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    f = feeds_for(s, 1, S, 0, np.random.default_rng(3), 32000)
    s.run(None, f)  # warm-up (also profiled; dropped below by taking the last `runs` runs)
    for _ in range(runs):
        s.run(None, f)
    prof = s.end_profiling()
    ev = json.load(open(prof))
    os.unlink(prof)
    run_ev = [e for e in ev if e.get("cat") == "Session" and e.get("name") == "model_run"]
    t_first = sorted(e["ts"] for e in run_ev)[-runs]
    per = collections.Counter()
    by_node = collections.Counter()
    for e in ev:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= t_first:
            per[e["args"]["op_name"]] += e["dur"]
            by_node[(e["name"][:-len("_kernel_time")], e["args"]["op_name"])] += e["dur"]
    total = sum(per.values())
    runs_ms = [e["dur"] / 1e3 for e in sorted(run_ev, key=lambda e: e["ts"])[-runs:]]
    nodes = {k: v / runs / 1e3 for k, v in by_node.items()}
    return {k: v / runs / 1e3 for k, v in per.most_common()}, total / runs / 1e3, runs_ms, nodes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--S", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = {}
    for name in ("model", "model_fused"):
        ld = load()
        per, total, runs, nodes = profile(FULL / f"{name}.onnx", a.S, a.runs, a.threads)
        res[name] = {"per_op_ms": per, "kernel_total_ms": total, "run_ms": runs, "load1": ld}
        res[name]["_nodes"] = nodes
        print(f"{name}: kernels {total:.1f} ms/run, model_run {[round(r, 1) for r in runs]} ms, load {ld:.2f}")
        for k, v in per.items():
            print(f"   {k:28s} {v:9.1f} ms")
    # RoPE attribution by node name: nodes of the (ORT-optimized) original that are gone from the
    # fused model's profile = the RoPE subgraphs ropekit removed; nodes only in the fused = its ops.
    a_n, b_n = res["model"].pop("_nodes"), res["model_fused"].pop("_nodes")
    a_names, b_names = {k[0] for k in a_n}, {k[0] for k in b_n}
    removed = collections.Counter()
    for (nm, op), v in a_n.items():
        if nm not in b_names:
            removed[op] += v
    added = collections.Counter()
    for (nm, op), v in b_n.items():
        if nm not in a_names:
            added[op] += v
    res["rope_original_ms"] = dict(removed)
    res["rope_fused_ms"] = dict(added)
    res["kernel_total_ms_matmul_excluded"] = {
        k: res[k]["kernel_total_ms"] - res[k]["per_op_ms"].get("MatMul", 0) - res[k]["per_op_ms"].get("FusedMatMul", 0)
        for k in ("model", "model_fused")}
    print(f"RoPE nodes only in the original: {sum(removed.values()):.1f} ms/run {dict(removed)}")
    print(f"nodes only in the fused model:   {sum(added.values()):.1f} ms/run {dict(added)}")
    print(f"kernel time without MatMul/FusedMatMul: {res['kernel_total_ms_matmul_excluded']}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
