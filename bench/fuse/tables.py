#!/usr/bin/env python3
"""Print the markdown tables of bench/results-fuse.md from the JSON files the other scripts wrote
($ROPEKIT_BENCH_DIR/{fuse_cli,latency or lat_fixtures + lat_full,optimizer,profile*}.json).

    .venv/bin/python bench/fuse/tables.py
"""
from __future__ import annotations

import json

from common import WORK


def j(name):
    p = WORK / name
    return json.loads(p.read_text()) if p.exists() else None


def fuse_cli():
    d = j("fuse_cli.json")
    if not d:
        return
    r = d["report"]
    print("| runs | wall median (min..max) | peak RSS median | weights (external data) | fused .onnx | nodes | RotaryEmbedding | Cos/Sin left |")
    print("|---|---|---|---|---|---|---|---|")
    w = [x["wall_s"] for x in d["runs"]]
    print(f"| {len(w)} | {d['median_wall_s']:.3f} s ({min(w):.3f}..{max(w):.3f}) | {d['median_rss_kb'] / 1024:.1f} MiB "
          f"| {d['external_data_bytes'] / 2**20:.0f} MiB | {d['fused_bytes'] / 2**20:.1f} MiB (was "
          f"{d['model_bytes'] / 2**10:.0f} KiB) | {r['nodes_before']} -> {r['nodes_after']} | {d['rotary_nodes']} "
          f"({r['sites_fused']}/{r['sites_found']} sites) | {d['cos_sin_left']} |")
    loads = ", ".join(f"{x['load1']:.2f}" for x in d["runs"])
    print(f"\nload1 during the runs: {loads}\n")
    print("| parity B, S, positions | max abs diff / max abs logit | max abs logit |")
    print("|---|---|---|")
    for c in d["parity"]:
        print(f"| {c['B']}, {c['S']}, {c['base']}..{c['base'] + c['S'] - 1} | {c['rel_diff']:.2g} | {c['scale']:.3g} |")


def latency():
    rows = (j("latency.json") or []) or ((j("lat_fixtures.json") or []) + (j("lat_full.json") or []))
    if not rows:
        return
    print("| model | sites fused | threads | prefill orig ms | prefill fused ms | speed-up | decode orig ms | decode fused ms | speed-up | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    key = {}
    for r in rows:
        key.setdefault((r["model"], r["threads"]), {})[r["phase"]] = r
    for (m, t), p in key.items():
        pf, dc = p["prefill"], p["decode"]
        f = (lambda x: f"{x:.3f}") if pf["orig_ms"] < 100 else (lambda x: f"{x:.0f}")
        g = (lambda x: f"{x:.3f}") if dc["orig_ms"] < 10 else (lambda x: f"{x:.1f}")
        print(f"| {m} (S={pf['S']}) | {pf['fused_sites']} | {t} | {f(pf['orig_ms'])} | {f(pf['fused_ms'])} | "
              f"{pf['speedup']:.2f} | {g(dc['orig_ms'])} | {g(dc['fused_ms'])} | {dc['speedup']:.2f} | "
              f"{max(pf['load1'], dc['load1']):.1f} |")


def profile():
    for name in ("profile_t1.json", "profile_t2.json", "profile_decode_t1.json", "profile.json"):
        d = j(name)
        if not d:
            continue
        a, b = d["model"], d["model_fused"]
        ro, rf = sum(d["rope_original_ms"].values()), sum(d["rope_fused_ms"].values())
        print(f"| {name} | {a['kernel_total_ms']:.1f} | {b['kernel_total_ms']:.1f} | {ro:.1f} | {rf:.1f} | "
              f"{ro - rf:.1f} ({(ro - rf) / a['kernel_total_ms'] * 100:.1f}%) | "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(d["rope_original_ms"].items(), key=lambda x: -x[1]) if v >= 0.05)
              + " |")


def optimizer():
    rows = j("optimizer.json")
    if not rows:
        return
    print("| fixture | nodes | expected sites | ropekit RotaryEmb. | ropekit ms | ropekit parity | ORT o0 RotaryEmb. (bert/gpt2/gpt_neox/qwen3) | ORT o0 s | ORT o1 RotaryEmb. | ORT o1 s | ORT parity (o0) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rk, o = r["ropekit"], r["ort"]
        types = ["bert", "gpt2", "gpt_neox", "qwen3"]
        c0 = "/".join(str(o[f"{t}/o0"].get("rope_nodes", "E")) for t in types)
        c1 = "/".join(str(o[f"{t}/o1"].get("rope_nodes", "E")) for t in types)
        t0 = max(o[f"{t}/o0"]["time_s"] for t in types)
        t1 = max(o[f"{t}/o1"]["time_s"] for t in types)
        t0n = min(o[f"{t}/o0"]["time_s"] for t in types)
        t1n = min(o[f"{t}/o1"]["time_s"] for t in types)
        par = {o[f"{t}/o0"].get("parity") for t in types} - {None}
        par = "; ".join(sorted({p if not p.startswith("error") else "does not load (RotaryEmbedding type error)" for p in par})) or "-"
        rkc = f"{rk['rope_nodes']}" + ("" if rk["rope_nodes"] == r["sites_expected"] else
                                        f" (found {rk['found']})")
        print(f"| {r['model']} | {r['nodes']} | {r['sites_expected']} | {rkc} | {rk['time_s'] * 1e3:.0f} | {rk['parity'] or '-'} "
              f"| {c0} | {t0n:.2f}-{t0:.2f} | {c1} | {t1n:.2f}-{t1:.2f} | {par} |")
    phi = {v.get("error") for r in rows for k, v in r["ort"].items() if k.startswith("phi")}
    print(f"\nmodel_type phi, every fixture, both levels: {phi}")


if __name__ == "__main__":
    print("## fuse CLI\n"); fuse_cli()
    print("\n## latency\n"); latency()
    print("\n## profile\n")
    print("| profile | kernels orig ms/run | kernels fused ms/run | RoPE nodes (orig) ms | RotaryEmbedding ms | saved | RoPE time in the original by op type (ms) |")
    print("|---|---|---|---|---|---|---|")
    profile()
    print("\n## ORT optimizer\n"); optimizer()
