"""dot2 of the WebGPU kernels on one adapter: exactness against numpy's double arithmetic and
throughput, for the arithmetic files of src/webgpu/shaders (exact32 by default).

dot2(a, b, c, d) must equal float32(float64(a)*float64(b) + float64(c)*float64(d)) bit for bit
(src/cpu/ref.c's arithmetic): checked on random bit patterns (every exponent: subnormal inputs
and results, overflow, cancellation), rotary-like values, signed zeros and constructed double
rounding cases (a product on a float32 midpoint plus a term below half a double ulp, and just
above it). Non-finite inputs are left out (dot2 hands them to the float unit on purpose).

Throughput: one dispatch of n dot2 (one per invocation, inputs from a storage buffer), fastest of
7 dispatches, each waited for; the float row is a*b + c*d in float32 (not exact), for scale.

Usage: python bench_dot2.py [--arith exact32.wgsl,other.wgsl] [--n N] [--check-only]
Software adapter: VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json (SwiftShader).
"""
import argparse
import os
import sys
import time

import numpy as np
import wgpu

HERE = os.path.dirname(os.path.abspath(__file__))
SHADERS = os.path.join(HERE, "..", "..", "src", "webgpu", "shaders")

KERNEL = """
@group(0) @binding(0) var<storage, read> inp: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> outp: array<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>,
                                     @builtin(num_workgroups) nw: vec3<u32>) {
    let i = g.x + g.y * nw.x * 64u;
    if (i >= arrayLength(&outp)) { return; }
    let v = inp[i];
    outp[i] = bitcast<u32>(dot2(bitcast<f32>(v.x), bitcast<f32>(v.y), bitcast<f32>(v.z),
                                bitcast<f32>(v.w)));
}
"""
# QKNorm's accumulator: two lanes of 8 squares each, combined (acc_add), as a float32
ACC_KERNEL = """
@group(0) @binding(0) var<storage, read> inp: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> outp: array<u32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>,
                                     @builtin(num_workgroups) nw: vec3<u32>) {
    let i = g.x + g.y * nw.x * 64u;
    if (i >= arrayLength(&outp)) { return; }
    var l0 = acc_zero();
    var l1 = acc_zero();
    for (var k = 0u; k < 2u; k++) {
        let v0 = inp[4u * i + k];
        let v1 = inp[4u * i + 2u + k];
        for (var j = 0u; j < 4u; j++) {
            l0 = acc_add_sq(l0, bitcast<f32>(v0[j]));
            l1 = acc_add_sq(l1, bitcast<f32>(v1[j]));
        }
    }
    outp[i] = bitcast<u32>(acc_f32(acc_add(l0, l1)));
}
"""
FLOAT = "fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 { return a * b + c * d; }\n"


def source(arith, kernel=KERNEL):
    # the prelude of src/webgpu/kernels.c: FAST (common.wgsl's narrowing reads it too), the
    # integer primitives and the slow paths
    common = "const FAST: bool = true;\n" + open(os.path.join(SHADERS, "common.wgsl")).read().replace("WG +", "64u +")
    if arith == "float":
        return common + FLOAT + kernel
    core = "".join(
        open(os.path.join(SHADERS, f)).read() for f in ("exact_f32.wgsl", "slow_int.wgsl"))
    return common + core + open(os.path.join(SHADERS, arith)).read() + kernel


def acc_reference(v16):
    d = v16.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        s0 = np.zeros(len(d))
        s1 = np.zeros(len(d))
        for j in range(8):  # lane 0: elements 0-7, lane 1: 8-15, each sum rounded to double
            s0 = s0 + d[:, j] * d[:, j]
            s1 = s1 + d[:, 8 + j] * d[:, 8 + j]
        r = (s0 + s1).astype(np.float32)
    return r.view(np.uint32)


def cases(rng, n):
    f32 = np.float32
    parts = []
    # random bit patterns, finite
    u = rng.integers(0, 2**32, size=(n, 4), dtype=np.uint64).astype(np.uint32)
    u = u[((u >> 23) & 0xFF != 0xFF).all(axis=1)]
    parts.append(u.view(np.float32))
    # random exponents near each other (cancellation) and rotary-like values
    m = rng.standard_normal((n, 4)).astype(f32) * np.exp2(rng.integers(-20, 20, (n, 1))).astype(f32)
    parts.append(m)
    x = rng.standard_normal((n, 2)).astype(f32)
    ang = rng.uniform(0, 1e4, n) * np.exp2(-rng.integers(0, 30, n))
    parts.append(np.stack([np.cos(ang).astype(f32), x[:, 0], -np.sin(ang).astype(f32), x[:, 1]], 1))
    # near-cancellation: c*d close to -a*b
    a = rng.standard_normal(n).astype(f32)
    b = rng.standard_normal(n).astype(f32)
    c = (a * (1 + rng.integers(-8, 8, n) * 2.0**-23)).astype(f32)
    parts.append(np.stack([a, b, -c, b], 1))
    # subnormal and tiny operands, products near the float32 subnormal range and overflow
    t = (rng.standard_normal((n, 4)) * np.exp2(rng.integers(-149, -40, (n, 4)))).astype(f32)
    parts.append(t)
    big = (rng.standard_normal((n, 4)) * np.exp2(rng.integers(40, 127, (n, 4)))).astype(f32)
    parts.append(big)
    mix = np.where(rng.random((n, 4)) < 0.5, t, big).astype(f32)
    parts.append(mix)
    # products on a float32 midpoint (24929 * 673 = 2^24 + 1) plus a small term below, at and
    # above half a double ulp of the sum (2^-29 at 2^24): double rounding decides
    k = np.arange(n)
    sc = np.exp2(rng.integers(-100, 80, n)).astype(np.float64)
    ea = (24929.0 * sc).astype(f32)
    small = np.exp2(-rng.integers(20, 60, n)) * (1 + (k % 3)) * np.where(k % 2, 1, -1)
    parts.append(np.stack([ea, np.full(n, 673, f32), (small * sc).astype(f32), np.ones(n, f32)], 1))
    odd = (rng.integers(2**11, 2**12, n) * 2 + 1).astype(np.float64)
    parts.append(np.stack([(odd * sc).astype(f32), (odd * 2.0**-12).astype(f32),
                           (small * sc).astype(f32), (rng.integers(1, 2**24, n) * 2.0**-24).astype(f32)], 1))
    # signed zeros
    z = np.array([0.0, -0.0, 1.0, -1.0, 2.0**-149, -(2.0**-149)], f32)
    zz = np.array(np.meshgrid(z, z, z, z)).reshape(4, -1).T
    parts.append(zz)
    v = np.concatenate(parts).astype(f32)
    return np.ascontiguousarray(v)


def reference(v):
    d = v.astype(np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        r = (d[:, 0] * d[:, 1] + d[:, 2] * d[:, 3]).astype(np.float32)
    return r.view(np.uint32)


def run(dev, src, v, reps, out_n=None):
    mod = dev.create_shader_module(code=src)
    t0 = time.perf_counter()
    pipe = dev.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
    compile_s = time.perf_counter() - t0
    n = len(v) if out_n is None else out_n
    bi = dev.create_buffer_with_data(data=v.view(np.uint32).tobytes(), usage=wgpu.BufferUsage.STORAGE)
    bo = dev.create_buffer(size=max(16, n * 4), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": bi}}, {"binding": 1, "resource": {"buffer": bo}}])
    groups = (n + 63) // 64
    gx = min(groups, 65535)
    gy = (groups + gx - 1) // gx
    times = []
    for _ in range(reps):
        enc = dev.create_command_encoder()
        p = enc.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bg)
        p.dispatch_workgroups(gx, gy, 1)
        p.end()
        t0 = time.perf_counter()
        dev.queue.submit([enc.finish()])
        out = np.frombuffer(dev.queue.read_buffer(bo, 0, 4), np.uint32)
        times.append(time.perf_counter() - t0)
    out = np.frombuffer(dev.queue.read_buffer(bo), np.uint32)[:n]
    return out, min(times), compile_s  # the least disturbed run (shared machines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arith", default="arith_exact32.wgsl",
                    help="comma-separated arithmetic files of src/webgpu/shaders, or 'float'")
    ap.add_argument("--n", type=int, default=20000, help="cases per family")
    ap.add_argument("--bench-n", type=int, default=1 << 20)
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--acc", action="store_true",
                    help="also check QKNorm's sum-of-squares accumulator (exact32 only)")
    a = ap.parse_args()
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    dev = adapter.request_device_sync()
    print("adapter:", adapter.info.get("device", "?"), adapter.info.get("backend_type", ""))
    rng = np.random.default_rng(a.seed)
    v = cases(rng, a.n)
    jobs = [(arith, source(arith), v, reference(v), None, arith != "float") for arith in a.arith.split(",")]
    if a.acc:  # 16 values per case: the dot2 cases' values, scaled rows, and non-finite ones
        w = v.reshape(-1)[: len(v) // 4 * 16].reshape(-1, 16).copy()
        w[::7, 3] = np.float32(np.inf)
        w[::11, 5] = np.float32(np.nan)
        w[1::13] = (w[1::13] * np.float32(2.0**-60)).astype(np.float32)
        jobs.append(("acc (arith_exact32.wgsl)", source("arith_exact32.wgsl", ACC_KERNEL),
                     np.ascontiguousarray(w.reshape(-1, 4)), acc_reference(w), 4, True))
    bad = 0
    for name, src, inp, ref, group, counted in jobs:
        # group: input rows (of 4 values) per output; None: one dot2 per row
        n_out = len(inp) if group is None else len(inp) // group
        out, _, cs = run(dev, src, inp, 1, n_out)
        wrong = out != ref
        if group is not None:  # the sums of squares: any NaN matches any NaN
            wrong &= ~(((ref & 0x7FFFFFFF) > 0x7F800000) & ((out & 0x7FFFFFFF) > 0x7F800000))
        wrong = np.nonzero(wrong)[0]
        if counted:
            bad += len(wrong)
        print(f"{name}: {n_out} cases, {n_out - len(wrong)} passed, {len(wrong)} failed (pipeline {cs:.2f} s)")
        for i in wrong[:5]:
            shown = inp[i] if group is None else inp[i * group:(i + 1) * group].reshape(-1)
            print("  ", [hex(x) for x in shown.view(np.uint32)], "got", hex(out[i]), "want", hex(ref[i]))
        if not a.check_only:
            nb = a.bench_n if group is None else a.bench_n // 16
            rows = nb if group is None else nb * group
            bv = np.ascontiguousarray(np.resize(inp, (rows, 4)))
            _, t, _ = run(dev, src, bv, 7, nb)
            what, unit, count = ("dot2", "each", nb) if group is None else ("sums of 16 squares", "per square", nb * 16)
            print(f"{name}: {nb} {what} in {t * 1e3:.2f} ms ({t / count * 1e9:.2f} ns {unit})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
