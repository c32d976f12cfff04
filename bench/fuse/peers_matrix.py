#!/usr/bin/env python3
"""Peers on the fusion matrix: how many RotaryEmbedding nodes do onnxruntime's transformers
optimizer and onnxscript's ort_fusions.optimize_for_ort produce on the same models that
tests/python/test_fuse_matrix.py judges ropekit on, and does their output still load?

A benchmark program, not a test. Needs onnxruntime (with its `transformers` tools, which import
sympy and torch-free modules only), onnx, onnxscript/onnx_ir; e.g. /opt/venv-torch/bin/python.

    python bench/fuse/peers_matrix.py [--json OUT.json] [--markdown OUT.md] [--only NAME ...]
                                      [--reuse EARLIER.json]   # measure only models not in it

One subprocess per tool runs all models (a model that crashes the tool ends that batch; the
rest is then run again in a new subprocess, so a crash costs one row, not the run):
  ort-gpt2   optimize_model(path, model_type="gpt2", num_heads=0, hidden_size=0, opt_level=0)
  ort-qwen3  the same with model_type="qwen3" (the on-the-fly RoPE path of ORT >= 1.30)
  onnxscript optimize_for_ort(onnx_ir.load(path)); it may fold RoPE into GroupQueryAttention
             nodes (do_rotary=1): counted separately in `gqa_rotary`.
Each output is saved to a temporary folder (external data beside it) and loaded in onnxruntime
(CPU EP, optimizations off); `loads` says whether that worked.
Sites to compare with: `rope_sites` from the fixtures' expect.json (derived from the configs);
RotaryEmbedding nodes the exporter already wrote (torch's opset-23 exports) are subtracted.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIRS = [ROOT / "tests" / "fixtures" / "matrix", ROOT / "tests" / "fixtures" / "ort_fusion"]

CHILD = r'''
import json, os, sys, tempfile, logging
logging.disable(logging.WARNING)
import onnx, onnxruntime as ort
ort.set_default_logger_severity(4)
tool, paths = sys.argv[1], sys.argv[2:]
def count(m):
    rope = sum(1 for n in m.graph.node if n.op_type == "RotaryEmbedding")
    gqa = sum(1 for n in m.graph.node if n.op_type == "GroupQueryAttention" and
              any(a.name == "do_rotary" and a.i == 1 for a in n.attribute))
    return rope, gqa
for path in paths:
    out = {}
    with tempfile.TemporaryDirectory() as td:
        dst = os.path.join(td, "out.onnx")
        try:
            if tool.startswith("ort-"):
                from onnxruntime.transformers.optimizer import optimize_model
                from onnxruntime.transformers.fusion_options import FusionOptions
                mt = tool[4:]
                opt = optimize_model(path, model_type=mt, num_heads=0, hidden_size=0, opt_level=0,
                                     optimization_options=FusionOptions(mt))
                opt.save_model_to_file(dst, use_external_data_format=True)
            else:
                import onnx_ir as ir
                from onnxscript.rewriter.ort_fusions import optimize_for_ort
                model = ir.load(path)
                model, _ = optimize_for_ort(model)
                ir.save(model, dst, external_data="out.onnx.data")
            m = onnx.load(dst)
            out["rope"], out["gqa_rotary"] = count(m)
            try:
                so = ort.SessionOptions()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
                out["loads"] = True
            except Exception as e:
                out["loads"] = False
                out["load_error"] = (type(e).__name__ + ": " + str(e))[:200]
        except Exception as e:
            out["error"] = (type(e).__name__ + ": " + str(e))[:200]
    print("RESULT " + path + " " + json.dumps(out), flush=True)
'''

TOOLS = ["ort-gpt2", "ort-qwen3", "onnxscript"]


def run_tool(tool, paths, timeout=1200):
    res, todo = {}, list(paths)
    while todo:
        try:
            r = subprocess.run([sys.executable, "-c", CHILD, tool, *map(str, todo)],
                               capture_output=True, text=True, timeout=timeout)
            out, tail = r.stdout, f"exit {r.returncode}: {(r.stderr or '')[-200:]}"
        except subprocess.TimeoutExpired as e:
            out, tail = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), f"timeout {timeout}s"
        for line in out.splitlines():
            if line.startswith("RESULT "):
                p, js = line[7:].split(" ", 1)
                res[p] = json.loads(js)
        left = [p for p in todo if str(p) not in res]
        if left:
            res[str(left[0])] = {"error": tail}  # the model the tool died on
            left = left[1:]
        todo = left
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--reuse", help="take the rows of models already measured in this --json output")
    args = ap.parse_args()
    old = {}
    if args.reuse:
        old = {r["model"]: r for r in json.loads(pathlib.Path(args.reuse).read_text())["rows"]}
    rows, paths = [], []
    for d in DIRS:
        expect = json.loads((d / "expect.json").read_text())
        for name, e in sorted(expect.items()):
            if args.only and name not in args.only:
                continue
            if not e.get("loads_in_ort", True):
                continue  # originals that do not run; their repaired twins are measured
            import onnx
            pre = sum(1 for n in onnx.load(str(d / f"{name}.onnx"), load_external_data=False).graph.node
                      if n.op_type == "RotaryEmbedding")  # written by the exporter (opset 23)
            rows.append({"model": name, "where": d.name, "family": e.get("family", "ort_fusion"),
                         "rope_sites": e["rope_sites"], "in_input": pre})
            paths.append(str(d / f"{name}.onnx"))
    todo = [(row, p) for row, p in zip(rows, paths) if row["model"] not in old]
    for row, p in zip(rows, paths):
        if row["model"] in old:
            row.update({t: old[row["model"]][t] for t in TOOLS})
    for t in TOOLS:
        res = run_tool(t, [p for _, p in todo])
        for row, p in todo:
            row[t] = res[p]
        print(t, "done", flush=True)
    import onnxruntime
    import onnxscript
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
            "onnxruntime": onnxruntime.__version__, "onnxscript": onnxscript.__version__,
            "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    md = markdown(meta, rows)
    print(md)
    if args.markdown:
        pathlib.Path(args.markdown).write_text(md + "\n")


def cell(r):
    if "error" in r:
        return "error"
    s = str(r["rope"])
    if r.get("gqa_rotary"):
        s += f" (+{r['gqa_rotary']} GQA)"
    if not r.get("loads", True):
        s += " (no load)"
    return s


def markdown(meta, rows):
    out = [f"Date {meta['date']}, commit `{meta['commit']}`, onnxruntime {meta['onnxruntime']}, "
           f"onnxscript {meta['onnxscript']}, Python {meta['python']}.", "",
           "| model | RoPE sites | already in the input | ORT optimizer (gpt2) | ORT optimizer (qwen3) | onnxscript optimize_for_ort |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['rope_sites']} | {r['in_input']} | {cell(r['ort-gpt2'])} | "
                   f"{cell(r['ort-qwen3'])} | {cell(r['onnxscript'])} |")
    tot = sum(r["rope_sites"] for r in rows)
    out.append("")
    pre = sum(r["in_input"] for r in rows)
    for t in TOOLS:
        n = sum(max(r[t].get("rope", 0) - r["in_input"], 0) for r in rows if "error" not in r[t])
        good = sum(max(min(r[t].get("rope", 0), r["rope_sites"]) - r["in_input"], 0) for r in rows
                   if "error" not in r[t] and r[t].get("loads", True))
        err = sum(1 for r in rows if "error" in r[t])
        out.append(f"* {t}: {n} RotaryEmbedding nodes added over {len(rows)} models ({tot} RoPE "
                   f"sites, {pre} already fused by the exporter); {good} of them in outputs that "
                   f"load; {err} models where the tool raised.")
    return "\n".join(out)


if __name__ == "__main__":
    main()
