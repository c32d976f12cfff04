"""Shared helpers for the bench/fuse scripts (see run_all.sh)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"
CLI = pathlib.Path(os.environ.get("ROPEKIT_CLI", ROOT / "build" / "ropekit"))
WORK = pathlib.Path(os.environ.get("ROPEKIT_BENCH_DIR", "/tmp/ropekit_bench"))
FULL = WORK / "qwen3_full"

ort.set_default_logger_severity(3)


def fixtures(kind):
    """'dynamo' -> [llama, ...], 'ts' -> [ts_llama, ...] (sorted)."""
    names = sorted(p.stem for p in MODELS.glob("*.onnx"))
    return [n for n in names if n.startswith("ts_") == (kind == "ts")]


def fixture_info(name):
    return json.loads((MODELS / f"{name}.json").read_text())


def load():
    return os.getloadavg()[0]


def fuse_cli(src, dst, *extra):
    res = subprocess.run([str(CLI), "fuse", str(src), str(dst), "--json", *extra],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"ropekit fuse {src} failed ({res.returncode}): {res.stderr.strip()}")
    return json.loads(res.stdout)


def session(path, threads=1, opt=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = opt
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feeds_for(sess, B, S, base, rng, vocab):
    """input_ids random, position_ids base..base+S-1 (M-RoPE: 3 different streams as in
    tests/python/test_fuse.py), attention_mask ones."""
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, vocab, (B, S)).astype(np.int64)
        elif i.name == "position_ids":
            p = np.tile(np.arange(S), (B, 1)) + base
            if len(i.shape) == 3:
                p = np.stack([p, p // 2 + 1, (p * 3) % 97])
            feeds[i.name] = p.astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((B, S), np.int64)
        else:
            raise AssertionError(f"unexpected input {i.name}")
    return feeds


def rel_diff(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return float(np.abs(a - b).max() / np.abs(a).max())
