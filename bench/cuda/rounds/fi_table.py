#!/usr/bin/env python3
"""fi_table.py: the table of bench/results-cuda.md "FlashInfer (peer)" from bench_flashinfer's
output (bench_flashinfer.md of a device round): timing rows joined with the agreement rows.
Usage: fi_table.py ROUND/bench_flashinfer.md"""
import sys


def rows(lines, ncols):
    out = []
    for ln in lines:
        if ln.startswith("| ") and not ln.startswith("| shape"):
            c = [x.strip() for x in ln.strip().strip("|").split("|")]
            if len(c) >= ncols:
                out.append(c)
    return out


def main():
    text = open(sys.argv[1]).read()
    head, _, agree = text.partition("Agreement on the same inputs")
    t = rows(head.splitlines(), 10)
    a = {(r[0], r[1]): r for r in rows(agree.splitlines(), 11)}
    print("| shape | x | FlashInfer µs | ropekit µs | FlashInfer / ropekit | FlashInfer vs copy | "
          "ropekit vs copy | FlashInfer: max ulp from exact (elements differing) / from ropekit | "
          "ropekit: max ulp from exact (elements differing) / from its CPU reference |")
    print("|---|---|---:|---:|---:|---|---|---|---|")
    for r in t:
        g = a.get((r[0], r[1]))
        fi = f"{g[10]} / {g[7]}" if g else "(in place: same kernel as out of place)"
        rk = f"{g[9]} / {g[2]}" if g else ""
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {fi} | {rk} |")


main()
