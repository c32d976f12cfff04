#!/usr/bin/env python3
"""ropekit vs onnxruntime's CPU RotaryEmbedding, and bench/results-cpu.md.

Runs the C benchmark (build/ropekit_bench --json: ropekit and a copy of the same bytes, same
thread count, same process), then times onnxruntime's CPU kernel on the same shapes: a one-node
ai.onnx.RotaryEmbedding (opset 23) model, intra_op_num_threads = the same thread count, inputs and
a preallocated output bound once (IOBinding), median of batches after a warm-up. ORT has no
bfloat16 RotaryEmbedding on CPU and no MRotaryEmbedding / QKNormRotaryEmbedding /
InverseRotaryRegroup kernels: those rows have no ORT figure.

    .venv/bin/python bench/bench_ort.py [--bench build/ropekit_bench] [--time 0.4] [--quick]
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

try:  # a machine without the onnx package reads the models saved by --save-models elsewhere
    import onnx
    import onnx.helper as oh
except ImportError:
    onnx = None
MODEL_DIR = None  # --models DIR
ARRAY_OFFSET = 0  # --array-offset B: arrays start B bytes past a 64-byte boundary

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The C benchmark's rotary shapes: name -> (B, S, N = q+kv heads, H, R)
ROTARY_SHAPES = {
    "llama3-8b prefill": (1, 4096, 40, 128, 128),
    "bnsh 1x32x4096x128": (1, 4096, 32, 128, 128),
    "bnsh no position ids": (1, 4096, 32, 128, 128),
    "llama3-8b no position ids": (1, 4096, 40, 128, 128),
    "qwen3-0.6b prefill": (4, 2048, 24, 128, 128),
    "phi-2 partial R=32": (1, 2048, 64, 80, 32),
    "decode B=1 32x128": (1, 1, 32, 128, 128),
    "decode B=64 40x128": (64, 1, 40, 128, 128),
}
BNSH = {"bnsh 1x32x4096x128", "bnsh no position ids"}  # rank-4 x (B, N, S, H): fused dynamo models
NOPOS = {"bnsh no position ids", "llama3-8b no position ids"}  # 3-D tables (B, S, R/2), no ids
SWEEP = [2**i for i in range(14)]  # S for the plot, 40 x 128 heads


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def loadavg() -> str:
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def model_file(B, S, N, H, R, P, dtype, bnsh, nopos) -> str:
    return f"rotary_{B}_{S}_{N}_{H}_{R}_{P}_{np.dtype(dtype).name}_{int(bnsh)}_{int(nopos)}.onnx"


def rotary_model(B, S, N, H, R, P, dtype, bnsh=False, nopos=False) -> bytes:
    if onnx is None or MODEL_DIR is not None:
        path = pathlib.Path(MODEL_DIR or ".") / model_file(B, S, N, H, R, P, dtype, bnsh, nopos)
        if onnx is None or path.exists():
            return path.read_bytes()
    T = onnx.TensorProto.FLOAT if dtype == np.float32 else onnx.TensorProto.FLOAT16
    xshape = [B, N, S, H] if bnsh else [B, S, N * H]
    tshape = [B, S, R // 2] if nopos else [P, R // 2]
    ins = [oh.make_tensor_value_info("x", T, xshape),
           oh.make_tensor_value_info("cos", T, tshape),
           oh.make_tensor_value_info("sin", T, tshape)]
    if not nopos:
        ins.append(oh.make_tensor_value_info("pos", onnx.TensorProto.INT64, [B, S]))
    heads = {} if bnsh else {"num_heads": N}  # rank 4: the heads come from the shape
    node = oh.make_node("RotaryEmbedding", [i.name for i in ins], ["y"],
                        rotary_embedding_dim=R, interleaved=0, **heads)
    g = oh.make_graph([node], "rope", ins, [oh.make_tensor_value_info("y", T, xshape)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 23)])
    m.ir_version = 10
    data = m.SerializeToString()
    if MODEL_DIR is not None:
        path = pathlib.Path(MODEL_DIR) / model_file(B, S, N, H, R, P, dtype, bnsh, nopos)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return data


def _ropekit_module():
    """The Python binding over the library under test (ROPEKIT_LIB), or None when it does not load."""
    sys.path.insert(0, str(ROOT / "python"))
    os.environ.setdefault("ROPEKIT_LIB", str(ROOT / "build" / "libropekit.so"))
    try:
        import ropekit
        return ropekit
    except Exception:  # noqa: BLE001
        return None


def aligned(a: np.ndarray, align: int = 64) -> np.ndarray:
    """A copy of a at a 64-byte aligned address, as onnxruntime's own allocator places tensors
    (numpy's large arrays start 16 bytes into a page: vector rows then straddle cache lines, and
    ropekit writes no streaming stores to them; 1.5-1.8x slower on the dev VM)."""
    buf = np.empty(a.nbytes + 2 * align, np.uint8)
    off = (ARRAY_OFFSET - buf.ctypes.data) % align
    v = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    v[...] = a
    return v


def time_ort(B, S, N, H, R, dtype, threads, budget, bnsh=False, nopos=False, side=False,
             spin=False):
    """Median seconds per run of ORT's CPU RotaryEmbedding (inputs and a preallocated output
    bound once with IOBinding). side: also ropekit on the same arrays, in batches alternated with
    ORT's in this process (the C library called directly with views built once: ctypes adds
    ~1 us per call), returned as (ort, ropekit); ropekit is None where the binding does not load.
    spin: ORT's intra-op pool spins between runs (its default). Off here: a spinning pool keeps the
    pinned CPUs busy while ropekit's batches run beside it, so a second ropekit thread gains nothing."""
    P = max(S, 4096)
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (B, N, S, H) if bnsh else (B, S, N * H)).astype(dtype)
    ang = rng.uniform(0, 6.28, (B, S, R // 2) if nopos else (P, R // 2))
    cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    pos = (np.tile(np.arange(S, dtype=np.int64), (B, 1)) if S > 1
           else rng.integers(0, P, (B, S), dtype=np.int64))
    x, cos, sin, pos = aligned(x), aligned(cos), aligned(sin), aligned(pos)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(rotary_model(B, S, N, H, R, P, dtype, bnsh, nopos), so,
                                providers=["CPUExecutionProvider"])
    y = aligned(np.empty_like(x))
    io = sess.io_binding()
    for name, arr in (("x", x), ("cos", cos), ("sin", sin)) + (() if nopos else (("pos", pos),)):
        io.bind_cpu_input(name, arr)
    io.bind_output("y", "cpu", 0, y.dtype, y.shape, y.ctypes.data)
    for _ in range(3):
        sess.run_with_iobinding(io)
    t0 = time.perf_counter()
    sess.run_with_iobinding(io)
    one = max(time.perf_counter() - t0, 1e-7)
    k = int(1e-3 / one) + 1 if one < 1e-3 else 1
    batches = min(max(int(budget / (one * k)) + 1, 7), 2001)
    rk = _ropekit_module() if side else None
    call = None
    if rk is not None:
        yr = aligned(np.empty_like(x))
        keep = (x, cos, sin, pos, yr)  # the views point into these arrays
        views = [rk._view(x, "X"), rk._view(cos, "cos"), rk._view(sin, "sin"),
                 None if nopos else rk._view(pos, "pos", "ids"), rk._view(yr, "y", "any")]
        attrs = rk._rotary_attrs(0, R, 0 if bnsh else N, 0)
        args = [rk._ref(v) for v in views[:4]] + [ctypes.byref(attrs), rk._ref(views[4])]
        fn = rk._lib.ropekit_rotary_embedding
        rk.set_num_threads(threads)
        if fn(*args) != 0:
            raise RuntimeError(f"ropekit: {rk._lib.ropekit_last_error().decode()}")
        call = lambda: fn(*args)  # noqa: E731
    else:
        keep = None
    v, w = [], []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(k):
            sess.run_with_iobinding(io)
        v.append((time.perf_counter() - t0) / k)
        if call is not None:
            t0 = time.perf_counter()
            for _ in range(k):
                call()
            w.append((time.perf_counter() - t0) / k)
    v.sort()
    w.sort()
    del keep
    if not side:
        return v[len(v) // 2]
    return v[len(v) // 2], (w[len(w) // 2] if w else None)


def check_ort_matches_ropekit() -> str:
    """A sanity check that the ORT model computes the op ropekit computes (small f32 case)."""
    sys.path.insert(0, str(ROOT / "python"))
    os.environ.setdefault("ROPEKIT_LIB", str(ROOT / "build" / "libropekit.so"))
    try:
        import ropekit
    except Exception as e:  # noqa: BLE001
        return f"not run ({e})"
    B, S, N, H, R, P = 2, 5, 3, 16, 8, 11
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, S, N * H)).astype(np.float32)
    ang = rng.uniform(0, 6.28, (P, R // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = rng.integers(0, P, (B, S), dtype=np.int64)
    sess = ort.InferenceSession(rotary_model(B, S, N, H, R, P, np.float32),
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "cos": cos, "sin": sin, "pos": pos})[0]
    got = ropekit.rotary_embedding(x, cos, sin, pos, num_heads=N, rotary_embedding_dim=R)
    err = float(np.max(np.abs(got - want)))
    return f"max |ropekit - ORT| = {err:.3g} on a small f32 case (same op)"


def run_c_bench(exe, budget, extra) -> dict:
    out = subprocess.run([exe, "--json", "--time", str(budget), *extra], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def fmt_time(s: float) -> str:
    return f"{s * 1e9:.0f} ns" if s < 1e-3 else f"{s * 1e3:.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=str(ROOT / "build" / "ropekit_bench"))
    ap.add_argument("--time", type=float, default=0.4, help="seconds per measurement")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--quick", action="store_true", help="no sweep / plot")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results-cpu.md"))
    ap.add_argument("--filter", default=None, help="only the C benchmark's shapes containing this")
    ap.add_argument("--commit", default=None, help="the commit the benchmark was built from "
                    "(default: git rev-parse HEAD here)")
    ap.add_argument("--models", default=None, help="directory of the one-node models: written "
                    "when the onnx package is here, read when it is not")
    ap.add_argument("--ort-cache", default=None, help="JSON file of ORT times: read when it exists "
                    "(ORT does not depend on ropekit's CPU variant), written otherwise")
    ap.add_argument("--no-side", action="store_true", help="do not time ropekit beside ORT (in the "
                    "same process, alternating batches); the speedup then divides ORT's time by the C "
                    "benchmark's")
    ap.add_argument("--cpu-name", default=None, help="the CPU's name, where lscpu does not give it "
                    "(a VM's generic 'Processor')")
    ap.add_argument("--array-offset", type=int, default=0, help="bytes past a 64-byte boundary at "
                    "which the arrays of the ORT / 'beside ORT' timings start (16: where numpy's own "
                    "large arrays start); the C benchmark gets the same as --offset")
    args = ap.parse_args()
    global MODEL_DIR, ARRAY_OFFSET
    MODEL_DIR = args.models
    ARRAY_OFFSET = args.array_offset
    thread_list = [int(t) for t in args.threads.split(",")]

    load_before = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    c = run_c_bench(args.bench, args.time, ["--threads", args.threads] +
                    (["--filter", args.filter] if args.filter else []) +
                    (["--offset", str(args.array_offset)] if args.array_offset else []))
    rows = c["results"]
    ort_t = {}
    cache = pathlib.Path(args.ort_cache) if args.ort_cache else None
    cached = ({tuple(k.split("|")[:2]) + (int(k.split("|")[2]),): v
               for k, v in json.loads(cache.read_text()).items()} if cache and cache.exists() else {})
    side_t = {}  # ropekit timed beside ORT (same process, same arrays, alternating batches)
    side = not args.no_side and _ropekit_module() is not None
    if side and c["variant"] != _ropekit_module().cpu_variant():
        _ropekit_module().set_cpu_variant(c["variant"])
    for r in rows:
        if r["shape"] in ROTARY_SHAPES and r["dtype"] in ("f32", "f16"):
            B, S, N, H, R = ROTARY_SHAPES[r["shape"]]
            dt = np.float32 if r["dtype"] == "f32" else np.float16
            key = (r["shape"], r["dtype"], r["threads"])
            if side:  # ORT is timed again: the pairs are what the ratio is made of
                ort_t[key], side_t[key] = time_ort(B, S, N, H, R, dt, r["threads"], args.time,
                                                   r["shape"] in BNSH, r["shape"] in NOPOS, side=True)
            else:
                ort_t[key] = cached[key] if key in cached else time_ort(
                    B, S, N, H, R, dt, r["threads"], args.time, r["shape"] in BNSH, r["shape"] in NOPOS)
            print(f"ORT {r['shape']} {r['dtype']} t{r['threads']}: {fmt_time(ort_t[key])}"
                  + (f", ropekit beside it {fmt_time(side_t[key])}" if side_t.get(key) else ""),
                  file=sys.stderr)

    if cache and not cached:
        cache.write_text(json.dumps({f"{k[0]}|{k[1]}|{k[2]}": v for k, v in ort_t.items()}))

    sweep_rows, sweep_ort = [], {}
    if not args.quick:
        sweep_rows = run_c_bench(args.bench, min(args.time, 0.2),
                                 ["--sweep", "--threads", "1", "--dtypes", "f32,bf16"])["results"]
        for S in SWEEP:
            sweep_ort[S] = time_ort(1, S, 40, 128, 128, np.float32, 1, min(args.time, 0.2))
    load_after = loadavg()

    commit = args.commit or sh(["git", "rev-parse", "HEAD"]) or "?"
    dirty = "" if args.commit else sh(["git", "status", "--porcelain", "--untracked-files=no"])
    untracked = "" if args.commit else sh(["git", "status", "--porcelain"])
    cpu = args.cpu_name or sh(["bash", "-c", "lscpu | sed -n 's/^Model name: *//p' | head -1"]) or platform.processor()
    caches = sh(["bash", "-c", "lscpu | grep -E '^(L1d|L2|L3)' | sed 's/  */ /g' | paste -sd';'"])
    flags = sh(["bash", "-c", "grep -o -w -E 'avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_bf16|avx512_fp16' /proc/cpuinfo | sort -u | paste -sd' '"])

    L = []
    L.append("# ropekit CPU benchmark results\n")
    L.append(f"Generated by `bench/bench_ort.py` (which runs `build/ropekit_bench --json`) on "
             f"{started:%Y-%m-%d %H:%M} UTC.\n")
    L.append(f"- CPU: {cpu}, {os.cpu_count()} cores ({caches}); ISA flags: {flags}")
    L.append(f"- ropekit variant: **{c['variant']}** (chosen at run time; `ROPEKIT_CPU_VARIANT` forces one)")
    L.append(f"- commit: `{commit}`" + (" **plus uncommitted changes** (the CPU-speed work was not "
                                          "committed yet when this ran)" if dirty or untracked else ""))
    L.append(f"- onnxruntime {ort.__version__} (CPUExecutionProvider), numpy {np.__version__}, "
             f"Python {platform.python_version()}")
    L.append(f"- machine load (1/5/15-min load average): {load_before} before, {load_after} after. "
             "The machine is shared with other engineers' builds; every ropekit figure is paired "
             "with a copy measured in alternating batches in the same process, so the ratio is "
             "less sensitive to load than the absolute numbers.")
    if cached and not side:
        L.append(f"- ORT times: read from `{cache.name}`, written by the run before this one on the "
                 "same machine (ORT's kernel does not depend on ropekit's CPU variant)")
    L.append(f"- ORT sanity check: {check_ort_matches_ropekit()}\n")
    L.append("Method: median time per call over batches of ~1 ms after a warm-up. Bytes moved = read x "
             "+ write y + the cos/sin values once per token (QKNorm: query, kv, both outputs, cos/sin; "
             "regroup: input, output, cos/sin). GB/s = bytes / time. copy = a copy of half those "
             "bytes (so the same bytes move: read + write), same thread count, the faster of glibc's "
             "memcpy and a streaming-store copy, in alternating batches; large rows cold: every call "
             "and every copy on the next of K copies of its large buffers (>= 768 MiB in all, the "
             "L3 is 300 MiB), so none starts with its operands in the caches (bench/bench_mem.h); "
             "ratios per round (a round: one batch of the call, then one of each copy, so that "
             "all see the same state of the guest; >= 15 rounds per row): 'vs copy' is the median "
             "of the rounds' ratios (the round's faster copy time / the call's time), 'min' the "
             "lowest round; 'copy GB/s' the faster copy's median over the rounds, with its slowest "
             "and fastest round (how much the memory itself moved during the row). Out of place (except 'QKV in place': the q+k heads of a "
             "packed (B, S, 48*128) QKV buffer, rotated in place), contiguous x (B, S, N*H) (except 'bnsh': "
             "rank-4 x (B, N, S, H), the layout `ropekit fuse` emits for dynamo exports; 'bnsh in place': y = x), position ids 0..S-1 (decode: random), "
             "tables of dtype T with P = max(S, 4096) rows ('no position ids': 3-D tables (B, S, R/2), one row per token). Decode shapes fit in cache: in-cache "
             "figures, per call (validation included). ORT: one-node ai.onnx.RotaryEmbedding "
             "(opset 23) with IOBinding, intra_op_num_threads = threads. "
             + ("'ropekit beside ORT': the same call timed in the Python process that times ORT, on "
                "the same arrays (" + (f"starting {ARRAY_OFFSET} bytes past a 64-byte boundary, as numpy's "
                                     "own arrays do" if ARRAY_OFFSET else "64-byte aligned, as ORT's "
                                     "allocator places tensors") + "), in batches "
                "alternated with ORT's (ropekit's C function called "
                "directly with views built once; ctypes adds ~1 us per call, which matters only "
                "for decode rows); 'ropekit speedup vs ORT' divides ORT's time by it, so both sides "
                "see the same caches and the same load (the same arrays reused: warm, where the "
                "300 MiB L3 holds them; 'ORT vs copy' divides ORT's warm GB/s by the cold copy's). " if side else "")
             + "\n")
    L.append("| shape | dtype | threads | ropekit time | MB moved | GB/s | copy GB/s (slowest-fastest round) | vs copy | min | ORT time | ORT GB/s | ORT vs copy | ropekit beside ORT | ropekit speedup vs ORT |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def rmed(r):  # the median of the per-round ratios (older JSON: the ratio of medians)
        return r.get("round_ratio_median", r["ratio_copy"])

    def rmin(r):
        return r.get("round_ratio_min", r["best_ratio_copy"])

    def vs_ort(key, c_seconds):
        o = ort_t[key]
        return o / (side_t.get(key) or c_seconds)
    for r in rows:
        key = (r["shape"], r["dtype"], r["threads"])
        o = ort_t.get(key)
        b = side_t.get(key)
        ocol = (f"{fmt_time(o)} | {r['bytes'] / o * 1e-9:.2f} | "
                f"{r['bytes'] / o * 1e-9 / r['copy_gbps']:.2f} | {fmt_time(b) if b else 'n/a'} | "
                f"{vs_ort(key, r['seconds']):.2f}x" if o else "n/a | n/a | n/a | n/a | n/a")
        spread = (f" ({r['bytes'] / r['copy_slow_seconds'] * 1e-9:.1f}-"
                  f"{r['bytes'] / r['copy_fast_seconds'] * 1e-9:.1f})" if r.get("copy_slow_seconds") else "")
        L.append(f"| {r['shape']} | {r['dtype']} | {r['threads']} | {fmt_time(r['seconds'])} | "
                 f"{r['bytes'] * 1e-6:.2f} | {r['gbps']:.2f} | {r['copy_gbps']:.2f}{spread} | "
                 f"{rmed(r):.2f} | {rmin(r):.2f} | {ocol} |")
    L.append("")

    # targets
    def rows_of(pred):
        return [r for r in rows if pred(r)]
    big_rot = rows_of(lambda r: r["shape"] in ("llama3-8b prefill", "llama3-8b QKV in place", "bnsh 1x32x4096x128",
                                                "bnsh in place", "bnsh no position ids",
                                                "llama3-8b no position ids",
                                                "qwen3-0.6b prefill", "phi-2 partial R=32",
                                                "qwen2.5-vl mrope"))
    qr = rows_of(lambda r: r["shape"].startswith("dsv4"))
    L.append("## Targets (measured, not asserted)\n")
    for label, group in (("Rotary/MRotary", big_rot), ("QKNorm/Regroup", qr)):
        if group:
            lo = min(group, key=rmed)
            L.append(f"- {label}, large shapes, >= 0.9x the copy: {sum(rmed(r) >= 0.9 for r in group)}"
                     f"/{len(group)} rows on the median of the rounds' ratios "
                     f"({sum(rmin(r) >= 0.9 for r in group)}/{len(group)} in every round); median range "
                     f"{rmed(lo):.2f} .. {max(rmed(r) for r in group):.2f} (lowest: {lo['shape']} "
                     f"{lo['dtype']} {lo['threads']} thr); the copy's median GB/s over these rows "
                     f"{min(r['copy_gbps'] for r in group):.1f} .. {max(r['copy_gbps'] for r in group):.1f}.")
    sp = [(k, vs_ort(k, next(r["seconds"] for r in rows if (r["shape"], r["dtype"], r["threads"]) == k)))
          for k in ort_t]
    if sp:
        big = [s for k, s in sp if not k[0].startswith("decode")]
        dsp = [s for k, s in sp if k[0].startswith("decode")]
        if big:
            L.append(f"- >= 2x ORT: large shapes {sum(s >= 2 for s in big)}/{len(big)} rows, speedup "
                     f"{min(big):.1f}x .. {max(big):.1f}x.")
            # where ORT itself runs above half the copy's speed, 2x ORT would need ropekit above
            # the copy: the bound is copy GB/s / ORT GB/s
            cap = []
            for k, v in sp:
                r = next(r for r in rows if (r["shape"], r["dtype"], r["threads"]) == k)
                if not k[0].startswith("decode") and v < 2:
                    bound = r["copy_gbps"] / (r["bytes"] / ort_t[k] * 1e-9)
                    cap.append(f"{k[0]} {k[1]} {k[2]} thr {v:.2f}x (a copy would be {bound:.2f}x)")
            if cap:
                L.append("- rows under 2x ORT, each with the speedup a ropekit at the copy's speed "
                         "would reach (ORT vs copy above 0.5 makes 2x unreachable): "
                         + "; ".join(cap) + ".")
        if dsp:
            L.append(f"- vs ORT, decode: {min(dsp):.1f}x .. {max(dsp):.1f}x (ORT's per-run session overhead).")
    by_t = {(r["shape"], r["dtype"], r["threads"]): r["seconds"] for r in rows}
    scal = [(k, by_t[k] / by_t[(k[0], k[1], 2)]) for k in by_t if k[2] == 1 and (k[0], k[1], 2) in by_t]
    big_s = [v for k, v in scal if not k[0].startswith("decode")]
    small_s = [(k, v) for k, v in scal if k[0].startswith("decode B=1")]
    if big_s:
        lo = min((v, k) for k, v in scal if not k[0].startswith("decode"))
        L.append(f"- 2 threads >= 1.6x 1 thread, large shapes: {sum(v >= 1.6 for v in big_s)}/{len(big_s)} rows "
                 f"({min(big_s):.2f}x .. {max(big_s):.2f}x; lowest: {lo[1][0]} {lo[1][1]}).")
    if small_s:
        L.append("- small calls (decode B=1, not split): 1-thread / 2-thread time "
                 + ", ".join(f"{k[1]} {v:.2f}" for k, v in small_s) + ".")
    dec = rows_of(lambda r: r["shape"] == "decode B=1 32x128" and r["dtype"] == "f32")
    if dec:
        per_call = ", ".join(f"{fmt_time(r['seconds'])} ({r['threads']} thr)" for r in dec)
        L.append(f"- decode, 1 token, 32 heads x 128, f32, < 0.5 us per call: {per_call}.")
    L.append("")

    if sweep_rows:
        L.append("## Bandwidth vs size (Llama heads 40 x 128, B = 1, S = 1 .. 8192, one thread)\n")
        L.append("| S | MB moved | ropekit f32 GB/s | ropekit bf16 GB/s | copy GB/s (f32 bytes) | ORT f32 GB/s |")
        L.append("|---|---|---|---|---|---|")
        by = {(r["shape"], r["dtype"]): r for r in sweep_rows}
        for S in SWEEP:
            f = by.get((f"sweep S={S}", "f32"))
            b = by.get((f"sweep S={S}", "bf16"))
            if not f:
                continue
            o = sweep_ort.get(S)
            L.append(f"| {S} | {f['bytes'] * 1e-6:.3f} | {f['gbps']:.1f} | {b['gbps'] if b else float('nan'):.1f} | "
                     f"{f['copy_gbps']:.1f} | {f['bytes'] / o * 1e-9 if o else float('nan'):.1f} |")
        L.append("")
        png = pathlib.Path(args.out).with_name("results-cpu.png")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            xs = [by[(f"sweep S={S}", "f32")]["bytes"] * 1e-6 for S in SWEEP]
            fig, ax = plt.subplots(figsize=(7, 4.2))
            ax.plot(xs, [by[(f"sweep S={S}", "f32")]["gbps"] for S in SWEEP], "o-", label="ropekit f32")
            ax.plot([by[(f"sweep S={S}", "bf16")]["bytes"] * 1e-6 for S in SWEEP],
                    [by[(f"sweep S={S}", "bf16")]["gbps"] for S in SWEEP], "s-", label="ropekit bf16")
            ax.plot(xs, [by[(f"sweep S={S}", "f32")]["copy_gbps"] for S in SWEEP], "k--", label="copy (same bytes)")
            ax.plot(xs, [by[(f"sweep S={S}", "f32")]["bytes"] / sweep_ort[S] * 1e-9 for S in SWEEP], "^-",
                    label=f"onnxruntime {ort.__version__} f32")
            ax.set_xscale("log")
            ax.set_xlabel("MB moved per call (read x + write y + cos/sin)")
            ax.set_ylabel("GB/s")
            ax.set_title(f"RotaryEmbedding, 40 heads x 128, 1 thread, {cpu}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(png, dpi=110)
            L.append(f"![bandwidth vs size]({png.name})\n")
        except ImportError:
            L.append("(matplotlib is not installed: no plot.)\n")

    notes = pathlib.Path(__file__).with_name("results-cpu-notes.md")
    if notes.exists():
        L.append(notes.read_text())
    pathlib.Path(args.out).write_text("\n".join(L) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
