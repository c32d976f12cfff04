"""Summarise bench_cuda A/B logs: ab_summary.py DIR — files ab-<variant>-<round>.log; prints per
row the median time and the vs-copy figure of every round for each variant."""
import collections, glob, os, re, statistics, sys

d = sys.argv[1]
rows = collections.OrderedDict()
variants = []
for f in sorted(glob.glob(os.path.join(d, "ab-*-*.log"))):
    v, r = re.match(r"ab-(.+)-(\d+)\.log", os.path.basename(f)).groups()
    if v not in variants:
        variants.append(v)
    for line in open(f):
        c = [x.strip() for x in line.split("|")]
        if len(c) < 10 or not c[1] or c[1] == "shape" or c[1].startswith("-"):
            continue
        key = f"{c[1]} {c[2]}/{c[3]}"
        rows.setdefault(key, {}).setdefault(v, []).append((float(c[4]), c[8]))
print("| row | " + " | ".join(f"{v}: median us / vs copy per round" for v in variants) + " |")
print("|---|" + "---|" * len(variants))
for k, per in rows.items():
    cells = []
    for v in variants:
        xs = per.get(v, [])
        if not xs:
            cells.append("")
            continue
        cells.append(f"{statistics.median(t for t, _ in xs):.2f} / " + ", ".join(p for _, p in xs))
    print(f"| {k} | " + " | ".join(cells) + " |")
