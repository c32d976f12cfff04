#!/usr/bin/env python3
"""What onnxruntime's own transformer optimizer fuses on the fixtures, next to `ropekit fuse`.

For every fixture in tests/fixtures/models (dynamo <name>.onnx and TorchScript ts_<name>.onnx):
  * onnxruntime.transformers.optimizer.optimize_model(path, model_type=T, num_heads=N,
    hidden_size=H, opt_level=L, use_gpu=False) with default FusionOptions(T) (rotary fusion on),
    for T in bert, gpt2, gpt_neox, phi, qwen3 (every MODEL_TYPES entry that reaches
    FusionRotaryEmbeddings / FusionRotaryAttention: BertOnnxModel, Gpt2OnnxModel, PhiOnnxModel)
    and L in 0 (Python fusions only) and 1 (ORT basic optimizations first; the default for
    bert/gpt2); N, H from the fixture's config. Recorded: RotaryEmbedding nodes in the result
    (any domain), other fused contrib ops, node count, wall time of the call, errors.
  * ropekit fuse (CLI, --json; table length from the fixture's config.json): sites found/fused,
    RotaryEmbedding + MRotaryEmbedding nodes in the output, wall time (median of 3 processes).
Where a tool produced RotaryEmbedding nodes, the result is run in onnxruntime
(ORT_DISABLE_ALL) against the original on random inputs (B=2, S=7, positions 0..6 and 1000..1006):
max|diff|/max|orig|, or the error.

    /work/venvs/torch/bin/python bench/fuse/bench_ort_optimizer.py [--only NAME ...] [--json OUT]

Needs sympy (symbolic shape inference; without it every fusion pass fails) and, for opt_level >= 1,
torch (optimize_by_onnxruntime imports torch.version); .venv has neither, so run_all.sh uses the
fixture-export venv /work/venvs/torch (onnxruntime 1.32.0, onnx 1.23.2, the same versions as .venv;
override with PY_ORTOPT).
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import pathlib
import statistics
import subprocess
import sys
import time
import contextlib

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.transformers.optimizer import optimize_model

from common import CLI, MODELS, WORK, feeds_for, fixture_info, fixtures, fuse_cli, rel_diff, session

MODEL_TYPES = ["bert", "gpt2", "gpt_neox", "phi", "qwen3"]
OPT_LEVELS = [0, 1]
CONTRIB = {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "SkipLayerNormalization",
           "LayerNormalization", "Attention", "MultiHeadAttention", "GroupQueryAttention", "FastGelu",
           "BiasGelu", "Gelu", "GemmaRotaryEmbedding"}


def heads_hidden(cfg):
    n = cfg.get("num_attention_heads", cfg.get("n_head"))
    h = cfg.get("hidden_size", cfg.get("n_embd"))
    return int(n), int(h)


def rope_count(m):
    return sum(1 for n in m.graph.node if n.op_type in ("RotaryEmbedding", "MRotaryEmbedding"))


def parity(src, dst, vocab):
    try:
        a = session(src, 1, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        b = session(dst, 1, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        rng = np.random.default_rng(5)
        worst = 0.0
        for base in (0, 1000):
            f = feeds_for(a, 2, 7, base, rng, vocab)
            names = {i.name for i in b.get_inputs()}
            worst = max(worst, rel_diff(a.run(None, f)[0], b.run(None, {k: v for k, v in f.items() if k in names})[0]))
        return f"{worst:.2g}"
    except Exception as e:  # noqa: BLE001
        return "error: " + str(e).splitlines()[0][:160]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--json")
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    out = WORK / "ortopt"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.only or fixtures("dynamo") + fixtures("ts"):
        info = fixture_info(name)
        cfg = info["config"]
        nh, hid = heads_hidden(cfg)
        vocab = cfg.get("vocab_size", 128)
        src = MODELS / f"{name}.onnx"
        row = {"model": name, "exporter": info.get("exporter"), "sites_expected": info["rope_sites_expected"],
               "nodes": len(onnx.load(str(src)).graph.node), "ort": {}}
        # ropekit
        dst = out / f"{name}_ropekit.onnx"
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            rep = fuse_cli(src, dst)
            ts.append(time.perf_counter() - t0)
        fm = onnx.load(str(dst))
        row["ropekit"] = {"found": rep["sites_found"], "fused": rep["sites_fused"], "rope_nodes": rope_count(fm),
                          "nodes_after": len(fm.graph.node), "time_s": statistics.median(ts),
                          "reasons": sorted({s["reason"] for s in rep["sites"] if s["reason"]}),
                          "parity": parity(src, dst, vocab) if rope_count(fm) else None}
        for mt in MODEL_TYPES:
            for lvl in OPT_LEVELS:
                key = f"{mt}/o{lvl}"
                t0 = time.perf_counter()
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        om = optimize_model(str(src), model_type=mt, num_heads=nh, hidden_size=hid,
                                            opt_level=lvl, use_gpu=False)
                    dt = time.perf_counter() - t0
                    m = om.model
                    rc = rope_count(m)
                    other = {}
                    for n in m.graph.node:
                        if n.op_type in CONTRIB:
                            other[n.op_type] = other.get(n.op_type, 0) + 1
                    r = {"rope_nodes": rc, "nodes_after": len(m.graph.node), "time_s": dt, "other": other,
                         "rope_domains": sorted({n.domain for n in m.graph.node if n.op_type == "RotaryEmbedding"})}
                    if rc:
                        p = out / f"{name}_{mt}_o{lvl}.onnx"
                        onnx.save(m, str(p))
                        r["parity"] = parity(src, p, vocab)
                except Exception as e:  # noqa: BLE001
                    r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}",
                         "time_s": time.perf_counter() - t0}
                row["ort"][key] = r
        rows.append(row)
        best = max((v.get("rope_nodes", 0) for v in row["ort"].values()), default=0)
        errs = [k for k, v in row["ort"].items() if "error" in v]
        print(f"{name:22s} expected {row['sites_expected']}  ropekit {row['ropekit']['rope_nodes']} "
              f"({row['ropekit']['time_s'] * 1e3:.0f} ms)  ORT max {best}  "
              + " ".join(f"{k}={v.get('rope_nodes', 'E')}" for k, v in row["ort"].items())
              + (f"  errors: {errs}" if errs else ""), flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
