"""Results-file table from a round's logs: table.py AB_DIR [TORCH_LOG] [BASE NEW] — AB_DIR holds
bench_cuda logs ab-<variant>-<round>.log (ab_summary.py's naming); prints per row the median us
of the rounds and the vs-copy figure of each round for variants BASE and NEW (default: the first
two), and torch.compile's median us for the same shape and x dtype (bench_torch.py's table)."""
import os, statistics, sys

# ab_summary.py: beside this file on the device (pack.sh copies both), one folder up in the repo
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
from ab_summary import read_ab_logs

d = sys.argv[1]
tlog = sys.argv[2] if len(sys.argv) > 2 else None
rows, variants = read_ab_logs(d)
base, new = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else (variants[0], variants[1])
torch = {}
if tlog and os.path.exists(tlog):
    for line in open(tlog):
        c = [x.strip() for x in line.split("|")]
        if len(c) < 9 or c[1].startswith("shape") or c[1].startswith("-"):
            continue
        torch[(c[1], c[2])] = (c[4], c[6])
short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
print(f"| shape | x / tables | base ({base}): median µs / vs copy per round | **this revision ({new})** | torch.compile µs (tables in x's dtype) |")
print("|---|---|---|---|---:|")
for (shape, x, t), per in rows.items():
    cell = lambda v: (f"{statistics.median(a for a, _ in per[v]):.2f} / " + ", ".join(p for _, p in per[v])) if v in per else ""
    tk = shape.split(",")[0].strip()
    tc = ""
    for (ts, tx), (comp, cgraph) in torch.items():
        if tx == x and (ts == shape or ts == tk):
            tc = comp
            if "graph of" in shape or "launch" in shape:
                tc = cgraph + " (graph of 20)" if "graph of 20" in shape else ""
    print(f"| {shape} | {short.get(x, x)} / {short.get(t, t)} | {cell(base)} | **{cell(new)}** | {tc} |")
