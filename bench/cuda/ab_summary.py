"""Summarise bench_cuda A/B logs: ab_summary.py DIR — files ab-<variant>-<round>.log; prints per
row the median time and the vs-copy figure of every round for each variant. read_ab_logs() is
also used by rounds/table.py."""
import collections, glob, os, re, statistics, sys


def read_ab_logs(d):
    """(rows, variants): rows[(shape, x dtype, table dtype)][variant] = [(us, vs copy), ...] one
    entry per round, from the logs ab-<variant>-<round>.log in d (rows and variants in file order)."""
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
            rows.setdefault((c[1], c[2], c[3]), {}).setdefault(v, []).append((float(c[4]), c[8]))
    return rows, variants


if __name__ == "__main__":
    rows, variants = read_ab_logs(sys.argv[1])
    print("| row | " + " | ".join(f"{v}: median us / vs copy per round" for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for (shape, x, t), per in rows.items():
        cells = []
        for v in variants:
            xs = per.get(v, [])
            if not xs:
                cells.append("")
                continue
            cells.append(f"{statistics.median(t for t, _ in xs):.2f} / " + ", ".join(p for _, p in xs))
        print(f"| {shape} {x}/{t} | " + " | ".join(cells) + " |")
