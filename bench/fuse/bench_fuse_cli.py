#!/usr/bin/env python3
"""`ropekit fuse` on the synthetic full-size Qwen3 (make_synthetic_qwen3.py): wall time (median of
--repeat runs, each a fresh process writing a fresh output) and peak RSS (/usr/bin/time -v), next to
the size of the weights; then checks the output: RotaryEmbedding node count (expect 56), no Cos/Sin
left, onnx.checker (by path, external data), and parity against the original in onnxruntime
(ORT_DISABLE_ALL, 2 threads) on random inputs, max |diff| / max |original| <= 1e-5.

    .venv/bin/python bench/fuse/bench_fuse_cli.py [--model /tmp/ropekit_bench/qwen3_full/model.onnx]
        [--repeat 5] [--json OUT.json]
The fused model is written next to the input (model_fused.onnx) because it refers to the same
external data file by a relative path.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import time

import numpy as np
import onnx

from common import CLI, FULL, feeds_for, load, rel_diff, session
import onnxruntime as ort


def time_v(cmd):
    t0 = time.perf_counter()
    res = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(res.stderr)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    el = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", res.stderr).group(1)
    parts = [float(x) for x in el.split(":")]
    el_s = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return wall, el_s, rss_kb, res.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(FULL / "model.onnx"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    src = pathlib.Path(a.model)
    dst = src.with_name(src.stem + "_fused.onnx")
    data = sorted(src.parent.glob("*.data"))
    weight_bytes = sum(p.stat().st_size for p in data)
    out = {"model": str(src), "model_bytes": src.stat().st_size, "external_data_bytes": weight_bytes,
           "runs": []}
    for i in range(a.repeat):
        if dst.exists():
            dst.unlink()
        ld = load()
        wall, el, rss, stdout = time_v([str(CLI), "fuse", str(src), str(dst), "--json"])
        out["runs"].append({"wall_s": wall, "time_elapsed_s": el, "max_rss_kb": rss, "load1": ld})
        print(f"run {i}: {wall:.3f} s (time: {el:.2f} s), max RSS {rss / 1024:.1f} MiB, load {ld:.2f}")
    rep = json.loads(stdout)
    out["report"] = {k: v for k, v in rep.items() if k != "sites"}
    out["median_wall_s"] = statistics.median(r["wall_s"] for r in out["runs"])
    out["median_rss_kb"] = statistics.median(r["max_rss_kb"] for r in out["runs"])
    out["fused_bytes"] = dst.stat().st_size

    m = onnx.load(str(dst), load_external_data=False)
    ops = [n.op_type for n in m.graph.node]
    out["rotary_nodes"] = ops.count("RotaryEmbedding") + ops.count("MRotaryEmbedding")
    out["cos_sin_left"] = ops.count("Cos") + ops.count("Sin")
    out["fused_domains"] = sorted({n.domain for n in m.graph.node if n.op_type == "RotaryEmbedding"})
    onnx.checker.check_model(str(dst), full_check=False)
    print(f"{out['rotary_nodes']} RotaryEmbedding nodes ({out['fused_domains']}), Cos/Sin left "
          f"{out['cos_sin_left']}, nodes {rep['nodes_before']} -> {rep['nodes_after']}, "
          f"sites {rep['sites_fused']}/{rep['sites_found']}")

    # parity, graph optimizations off (what the graph means)
    so_a = session(src, 2, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so_b = session(dst, 2, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    vocab = so_a.get_outputs()[0].shape[-1]
    rng = np.random.default_rng(1234)
    checks = []
    for B, S, base in ((1, 1, 0), (1, 1, 40959), (2, 7, int(rng.integers(0, 40000))),
                       (1, 64, int(rng.integers(0, 40000))), (1, 512, 0)):
        f = feeds_for(so_a, B, S, base, rng, vocab)
        ya, yb = so_a.run(None, f)[0], so_b.run(None, f)[0]
        d = rel_diff(ya, yb)
        checks.append({"B": B, "S": S, "base": base, "rel_diff": d, "scale": float(np.abs(ya).max())})
        print(f"parity B={B} S={S} positions {base}..{base + S - 1}: max|diff|/max|y| = {d:.3g} "
              f"(max|y| {np.abs(ya).max():.3g})")
    out["parity"] = checks
    out["parity_ok"] = all(c["rel_diff"] <= 1e-5 for c in checks)
    print(f"median {out['median_wall_s']:.3f} s, median max RSS {out['median_rss_kb'] / 1024:.1f} MiB; "
          f"weights {weight_bytes / 2**20:.0f} MiB; parity ok: {out['parity_ok']}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
