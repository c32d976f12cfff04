// qknorm_row.wgsl — QKNormRotaryEmbedding, the row kernel: the results of qknorm.wgsl (and
// src/cpu/ref.c) bit for bit, for rows the host can read as 16-byte vectors (unit channel stride,
// head_dim and every row start a multiple of VE elements, head_dim <= RL * VPT * VE; so
// nope = head_dim - rope_head_dim is even and a rotation pair never leaves its vector).
//
// Prelude (kernels.c): the arithmetic (Acc, div_rn, sqrt_rn, dot2), the fast sum of squares
// (Fs: qknorm_sum64.wgsl with shader-f64, qknorm_sum32.wgsl without), VE (elements per vector:
// 4 or 8), VPT (vectors per invocation, 1..4), RL (invocations per row: 32 or 64), QR (rows per
// workgroup), unit_exp (the
// exponent of the unit a value is a multiple of), elem_to_f32 / f32_to_elem, rt_q, ld4_q / ld4_kv
// (array<vec4<u32>>), st4_qo / st4_kvo, ld_w, ld_c, ld_s (float32).
//
// One row (a query head or the kv row of a token) = RL invocations of the workgroup; invocation
// t owns vectors t, t + RL, ... of the row and keeps them in registers. Stages:
//   1. every vector of the row loaded at once (one 16-byte load each) and staged (raw bits) in
//      workgroup memory `xr` for the rare exact path; each invocation sums the squares of its
//      values in any order (Fs) and finds its smallest nonzero magnitude;
//   2. one invocation per row combines the RL partial sums and decides the float32 sum of
//      squares: the contract's sum (src/cpu/ref.c: doubles in sixteen lanes, a fixed butterfly)
//      and the fast sum differ from the exact sum S by at most 131 and 37 units of 2^-53 * S (all
//      terms are >= 0; at most 127 + 4 roundings on a lane's path for head_dim <= 2048, at most
//      31 + 6 for the fast sum), so where every value within a far wider margin of the fast sum
//      rounds to the same float32, that float32 is the contract's; where the fast sum is below
//      2^(g + 53), g the exponent of the smallest unit every square is a multiple of, both sums
//      are exact. Otherwise (a sum close to a rounding boundary, subnormal or non-finite sums)
//      the same invocation recomputes the sum in the contract's order from `xr` (qknorm.wgsl's
//      sixteen lanes and butterfly, one after the other). Then the factor 1 / sqrt(ss / hd + eps)
//      (rounded to T for a query head);
//   3. the kv row (with fp8) puts the maximum |scaled value| of each nope vector in `vmax`;
//   4. each invocation scales its vectors, the kv row's fp8 blocks take their maxima from
//      `vmax`, rope pairs are rotated, and each vector is stored with one 16-byte store.
// The code is straight-line on vec4 values (no function-scope arrays): wgpu's shader translation
// bounds every loop, which keeps drivers from unrolling it, and an array indexed in a loop that
// is not unrolled lives in (slow) local memory.

struct Params {
    q_base: u32, qo_base: u32, kv_base: u32, kvo_base: u32,
    qs: vec4<u32>,   // query strides (b, s, head, channel)
    qos: vec4<u32>,
    kvs: vec4<u32>,  // kv strides (b, s, channel, -)
    kvos: vec4<u32>,
    cs: vec4<u32>,   // cos strides (b, s, t, -)
    ss: vec4<u32>,
    w_base: u32, w_s: u32, c_base: u32, s_base: u32,
    B: u32, S: u32, heads: u32, hd: u32,
    rope: u32, nope: u32, fp8: u32, rows: u32,
    eps: f32, inv_hd: f32, zero: u32, pad2: u32, // inv_hd: 1/hd for a power of two, else 0;
    // zero: always 0 (the host and the runner leave it 0), the opaque zero of f16_words4
}

@group(0) @binding(0) var<uniform> P: Params;

const RV: u32 = RL * VPT;       // vectors per row slot
const NS: u32 = QR * RS;        // row slots per workgroup
var<workgroup> xr: array<vec4<u32>, NS * RV>; // the rows' input bits (the exact path)
var<workgroup> part: array<Fs, NS * RL>;       // partial sums of squares, one per invocation
var<workgroup> pmin: array<atomic<u32>, NS>;   // ~(smallest nonzero |bits| - 1) of each row
                                               // (atomicMax over the invocations: the zero
                                               // initial value of workgroup memory is ~max)
var<workgroup> factor: array<f32, NS>;
var<workgroup> vmax: array<f32, NS * RV>;      // fp8: max |v| of each nope vector

// ---- stage 1: the invocation's values ----

// float16 bits (in the low halves) as float32: zeros and normal values in vector integer
// arithmetic, else each value through f16_bits_to_f32 (the same bits)
fn f16x4(h: vec4<u32>) -> vec4<f32> {
    let a = h & vec4<u32>(0x7fffu);
    let e = a >> vec4<u32>(10u);
    let z = a == vec4<u32>(0u);
    if (all((e - vec4<u32>(1u) < vec4<u32>(30u)) | z)) {
        let m = select((a << vec4<u32>(13u)) + vec4<u32>(0x38000000u), vec4<u32>(0u), z);
        return bitcast<vec4<f32>>(m | ((h & vec4<u32>(0x8000u)) << vec4<u32>(16u)));
    }
    return vec4<f32>(f16_bits_to_f32(h.x), f16_bits_to_f32(h.y), f16_bits_to_f32(h.z),
                     f16_bits_to_f32(h.w));
}

fn fs_add4(f: Fs, v: vec4<f32>) -> Fs {
    return fs_add_sq(fs_add_sq(fs_add_sq(fs_add_sq(f, v.x), v.y), v.z), v.w);
}
// the squares of a vector's elements (e: the even elements as float32, or all four for float32;
// o: the odd ones) added to f (an all-zero vector adds nothing)
fn fs_vec(f: Fs, e: vec4<f32>, o: vec4<f32>) -> Fs {
    if (VE == 4u) { return fs_add4(f, e); }
    return fs_add4(fs_add4(f, e), o);
}

// min over the vector's elements of |bits| - 1 (a zero gives 0xffffffff: ignored); the bits as
// float32 bits (16-bit elements: the half-word in the top half, the same order)
fn min_vec(m: u32, r: vec4<u32>) -> u32 {
    if (VE == 4u) {
        let a = (r & vec4<u32>(0x7fffffffu)) - vec4<u32>(1u);
        return min(m, min(min(a.x, a.y), min(a.z, a.w)));
    }
    let lo = ((r << vec4<u32>(16u)) & vec4<u32>(0x7fff0000u)) - vec4<u32>(1u);
    let hi = (r & vec4<u32>(0x7fff0000u)) - vec4<u32>(1u);
    let a = min(lo, hi);
    return min(m, min(min(a.x, a.y), min(a.z, a.w)));
}

// ---- stage 2: the RL partial sums of a row (fs_row: qknorm_sum64/32.wgsl) ----

// ---- stage 2: the contract's order (the exact path), from the staged bits ----
fn row_elem(base: u32, c: u32) -> f32 {
    let v = xr[base + c / VE];
    if (VE == 4u) { return bitcast<f32>(v[c & 3u]); }
    let w = v[(c >> 1u) & 3u];
    return elem_to_f32(select(w & 0xffffu, w >> 16u, (c & 1u) == 1u));
}
// lane j of the CPU: channels j, j + 16, ... in order
fn slow_lane(base: u32, j: u32) -> Acc {
    var acc = acc_zero();
    for (var c = j; c < P.hd; c += 16u) { acc = acc_add_sq(acc, row_elem(base, c)); }
    return acc;
}
// the butterfly (widths 8, 4, 2, 1): b_j = (l_j + l_{j+8}) + (l_{j+4} + l_{j+12}),
// sum = (b_0 + b_2) + (b_1 + b_3); written as loops so that the lane's loop is inlined twice
fn slow_sum(base: u32) -> f32 {
    var c0 = acc_zero();
    var c1 = acc_zero();
    for (var q = 0u; q < 4u; q++) {
        let j = (q & 1u) * 2u + (q >> 1u); // b_0, b_2 (into c0), then b_1, b_3 (into c1)
        var p0 = acc_zero();
        for (var h = 0u; h < 2u; h++) {
            let ab = acc_add(slow_lane(base, j + 4u * h), slow_lane(base, j + 4u * h + 8u));
            if (h == 0u) { p0 = ab; } else { p0 = acc_add(p0, ab); }
        }
        if (q == 0u) { c0 = p0; } else if (q == 1u) { c0 = acc_add(c0, p0); }
        else if (q == 2u) { c1 = p0; } else { c1 = acc_add(c1, p0); }
    }
    return acc_f32(acc_add(c0, c1));
}

// ---- stage 4 ----
// v rounded to T and back: rt_q of each lane; 16-bit: through the vector conversions (the same
// bits as f32_to_elem / elem_to_f32: elem_words4 puts RN_T(v) in each word's low half, which
// elem_even4 widens back exactly)
fn rt4(v: vec4<f32>) -> vec4<f32> {
    if (VE == 4u) { return v; }
    return elem_even4(elem_words4(v, v));
}
// v * s with mul32's results lane by lane: the hardware's four products when every lane passes
// mul32's range check (tested as a vector), else mul32 lane after lane in a loop (one copy of
// its slow path in the kernel instead of one per lane and call)
fn mul4(v: vec4<f32>, s: vec4<f32>) -> vec4<f32> {
    let u = bitcast<vec4<u32>>(v);
    let us = bitcast<vec4<u32>>(s);
    let e = (u >> vec4<u32>(23u)) & vec4<u32>(0xffu);
    let es = (us >> vec4<u32>(23u)) & vec4<u32>(0xffu);
    let z = (u & vec4<u32>(0x7fffffffu)) == vec4<u32>(0u);
    let zs = (us & vec4<u32>(0x7fffffffu)) == vec4<u32>(0u);
    let ok = ((e - vec4<u32>(1u) < vec4<u32>(254u)) | z) & ((es - vec4<u32>(1u) < vec4<u32>(254u)) | zs) &
             (z | zs | (e + es - vec4<u32>(128u) < vec4<u32>(252u)));
    if (FAST && all(ok)) { return v * s; }
    var r = v;
    for (var i = 0u; i < 4u; i++) { r[i] = mul32(v[i], s[i]); }
    return r;
}
// mul32_ok(v, s) for a fixed s as a window of v's magnitude bits: v passes where it is zero
// (z: and s is zero or normal) or its exponent field lies in [lo, lo + n) (the bits: v's
// magnitude minus lo << 23 below n << 23); s normal: the fields 1 .. 254 with 128 <= e + es <=
// 379, s zero: 1 .. 254, else none
struct Win { lo: u32, n: u32, z: bool }
fn win_of(s: f32) -> Win {
    let u = bitcast<u32>(s);
    let es = (u >> 23u) & 0xffu;
    if ((u & 0x7fffffffu) == 0u) { return Win(1u << 23u, 254u << 23u, true); }
    if (es - 1u >= 254u) { return Win(0u, 0u, false); }
    let lo = max(1u, 128u - min(es, 127u));
    let hi = min(254u, 379u - es);
    return Win(lo << 23u, (hi + 1u - lo) << 23u, true); // hi >= lo for every normal s
}
// v * s with mul32's results lane by lane (s's window w: one test per lane)
fn mulw(v: vec4<f32>, s: f32, w: Win) -> vec4<f32> {
    let a = bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu);
    let ok = ((a - vec4<u32>(w.lo)) < vec4<u32>(w.n)) | ((a == vec4<u32>(0u)) & vec4<bool>(w.z));
    if (FAST && all(ok)) { return v * s; }
    var r = v;
    for (var i = 0u; i < 4u; i++) { r[i] = mul32(v[i], s); }
    return r;
}

// channels c0 .. c0+3 (inputs x) scaled: Rt(x * r) for a query head, Rt((x * r) * w[c]) for kv
fn normed4(is_kv: bool, c0: u32, x: vec4<f32>, rq: f32, wq: Win) -> vec4<f32> {
    if (is_kv) {
        let w = vec4<f32>(ld_w(P.w_base + c0 * P.w_s), ld_w(P.w_base + (c0 + 1u) * P.w_s),
                          ld_w(P.w_base + (c0 + 2u) * P.w_s), ld_w(P.w_base + (c0 + 3u) * P.w_s));
        return rt4(mul4(mulw(x, rq, wq), w));
    }
    return rt4(mulw(x, rq, wq));
}

// max |y| over the channels of y below nope, NaN skipped
fn nope_max4(c0: u32, y: vec4<f32>) -> f32 {
    var m: f32 = 0.0;
    if (c0 < P.nope) { m = max_abs(m, y.x); }
    if (c0 + 1u < P.nope) { m = max_abs(m, y.y); }
    if (c0 + 2u < P.nope) { m = max_abs(m, y.z); }
    if (c0 + 3u < P.nope) { m = max_abs(m, y.w); }
    return m;
}

// the rotation of pair (c, c+1), c - nope even: y[t] = x[t] c[t] - x[t+1] s[t],
// y[t+1] = x[t+1] c[t+1] + x[t] s[t+1] (double arithmetic: dot2; fast: dot2_fast, which sets
// slow_hit where it cannot promise dot2's result)
fn rot2(x0: f32, x1: f32, c: u32, cb: u32, sb: u32, fast: bool) -> vec2<f32> {
    let t = c - P.nope;
    let c0 = ld_c(cb + t * P.cs.z);
    let c1 = ld_c(cb + (t + 1u) * P.cs.z);
    let s0 = ld_s(sb + t * P.ss.z);
    let s1 = ld_s(sb + (t + 1u) * P.ss.z);
    if (fast) { return vec2<f32>(dot2_fast(x0, c0, neg32(x1), s0), dot2_fast(x1, c1, x0, s1)); }
    return vec2<f32>(dot2(x0, c0, neg32(x1), s0), dot2(x1, c1, x0, s1));
}

// One row's state for stage 4.
struct Row { is_kv: bool, fp8: bool, rq: f32, slot: u32, cb: u32, sb: u32, wq: Win }

// channels c0 .. c0+3 of the row, final values (c0 a multiple of 4 below hd)
fn final4(w: Row, c0: u32, x: vec4<f32>) -> vec4<f32> {
    var y = normed4(w.is_kv, c0, x, w.rq, w.wq);
    if (w.fp8 && c0 < P.nope) { // the block of channels [64 k, 64 k + 64): 64 / VE vectors
        let first = w.slot * RV + (c0 / 64u) * (64u / VE);
        var bm: f32 = 0.0;
        for (var k = 0u; k < 64u / VE; k++) { bm = max_pos(bm, vmax[first + k]); }
        let scale = fp8_block_scale(bm);
        for (var i = 0u; i < 4u; i++) { y[i] = fp8_quant(y[i], scale); } // one copy of its code
    }
    if (c0 + 4u > P.nope) { // rope pairs (nope is even: pairs start at even channels)
        let n = y; // the scaled values (the rotation's inputs)
        slow_hit = false;
        if (c0 >= P.nope) { y = vec4<f32>(rot2(n.x, n.y, c0, w.cb, w.sb, true), y.z, y.w); }
        if (c0 + 2u >= P.nope) { y = vec4<f32>(y.x, y.y, rot2(n.z, n.w, c0 + 2u, w.cb, w.sb, true)); }
        if (slow_hit) { // dot2 for the vector's pairs: one copy of its code, in a loop
            for (var k = 0u; k < 2u; k++) {
                if (c0 + 2u * k >= P.nope) {
                    let a = rot2(n[2u * k], n[2u * k + 1u], c0 + 2u * k, w.cb, w.sb, false);
                    y[2u * k] = a.x;
                    y[2u * k + 1u] = a.y;
                }
            }
        }
    }
    return y;
}

// a 16-bit vector's channels c0 .. c0+3 (lo) and c0+4 .. c0+7 (hi) from its even (e) and odd (o)
// elements as float32 (load_row's vector conversions)
struct W2 { lo: vec4<f32>, hi: vec4<f32> }
fn widen8(e: vec4<f32>, o: vec4<f32>) -> W2 {
    return W2(vec4<f32>(e.x, o.x, e.y, o.y), vec4<f32>(e.z, o.z, e.w, o.w));
}
// channels c0 .. c0+7 (lo, hi) rounded to T into four words (elem_words4: the scalar
// conversion's bits)
fn pack8(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> {
    return elem_words4(vec4<f32>(lo.x, lo.z, hi.x, hi.z), vec4<f32>(lo.y, lo.w, hi.y, hi.w));
}

// stage 3 for vector vi (elements e, o as in fs_vec) of a kv row: its nope maximum
fn kv_max(w: Row, vi: u32, e: vec4<f32>, o: vec4<f32>) {
    let c0 = vi * VE;
    if (VE == 4u) {
        vmax[w.slot * RV + vi] = nope_max4(c0, normed4(true, c0, e, w.rq, w.wq));
    } else {
        let x = widen8(e, o);
        vmax[w.slot * RV + vi] = max_pos(nope_max4(c0, normed4(true, c0, x.lo, w.rq, w.wq)),
                                     nope_max4(c0 + 4u, normed4(true, c0 + 4u, x.hi, w.rq, w.wq)));
    }
}

// stage 4 for vector vi (elements e, o as in fs_vec): the stored bits
fn out_vec(w: Row, vi: u32, e: vec4<f32>, o: vec4<f32>) -> vec4<u32> {
    let c0 = vi * VE;
    if (!w.is_kv && c0 + VE <= P.nope) { // a query vector without rope channels: x * r rounded once
        if (VE == 4u) { return bitcast<vec4<u32>>(mulw(e, w.rq, w.wq)); }
        return elem_words4(mulw(e, w.rq, w.wq), mulw(o, w.rq, w.wq));
    }
    if (VE == 4u) { return bitcast<vec4<u32>>(final4(w, c0, e)); }
    let x = widen8(e, o);
    return pack8(final4(w, c0, x.lo), final4(w, c0 + 4u, x.hi));
}

fn load_vec(is_kv: bool, e: u32) -> vec4<u32> {
    if (is_kv) { return ld4_kv(e); }
    return ld4_q(e);
}
fn store_vec(is_kv: bool, e: u32, v: vec4<u32>) {
    if (is_kv) { st4_kvo(e, v); } else { st4_qo(e, v); }
}

// One row's place: its bounds and its input and output starts (in vectors).
struct RowAt { valid: bool, is_kv: bool, ib: u32, ob: u32, cb: u32, sb: u32 }
fn row_at(row: u32) -> RowAt {
    let r = min(row, P.rows - 1u);
    let tok = r / (P.heads + 1u);
    let j = r % (P.heads + 1u);
    let is_kv = j == P.heads;
    let b = tok / P.S;
    let s = tok % P.S;
    var ib: u32; var ob: u32;
    if (is_kv) {
        ib = P.kv_base + b * P.kvs.x + s * P.kvs.y;
        ob = P.kvo_base + b * P.kvos.x + s * P.kvos.y;
    } else {
        ib = P.q_base + b * P.qs.x + s * P.qs.y + j * P.qs.z;
        ob = P.qo_base + b * P.qos.x + s * P.qos.y + j * P.qos.z;
    }
    // the host checked: multiples of VE
    return RowAt(row < P.rows, is_kv, ib / VE, ob / VE, P.c_base + b * P.cs.x + s * P.cs.y,
                 P.s_base + b * P.ss.x + s * P.ss.y);
}

// A row's vectors t, t + RL, ... (zero past the row or for a row past the last): the bits r and,
// converted once, the elements as float32 (e: even elements, or all four for float32; o: odd)
struct Vecs {
    r0: vec4<u32>, r1: vec4<u32>, r2: vec4<u32>, r3: vec4<u32>,
    e0: vec4<f32>, e1: vec4<f32>, e2: vec4<f32>, e3: vec4<f32>,
    o0: vec4<f32>, o1: vec4<f32>, o2: vec4<f32>, o3: vec4<f32>,
}
fn load_row(a: RowAt, t: u32) -> Vecs {
    let nv = P.hd / VE;
    let z = vec4<u32>(0u);
    var r0 = z; var r1 = z; var r2 = z; var r3 = z;
    if (a.valid) {
        if (t < nv) { r0 = load_vec(a.is_kv, a.ib + t); }
        if (VPT > 1u && t + RL < nv) { r1 = load_vec(a.is_kv, a.ib + t + RL); }
        if (VPT > 2u && t + 2u * RL < nv) { r2 = load_vec(a.is_kv, a.ib + t + 2u * RL); }
        if (VPT > 3u && t + 3u * RL < nv) { r3 = load_vec(a.is_kv, a.ib + t + 3u * RL); }
    }
    let f = vec4<f32>(0.0);
    var v = Vecs(r0, r1, r2, r3, elem_even4(r0), f, f, f, elem_odd4(r0), f, f, f);
    if (VPT > 1u) { v.e1 = elem_even4(r1); v.o1 = elem_odd4(r1); }
    if (VPT > 2u) { v.e2 = elem_even4(r2); v.o2 = elem_odd4(r2); }
    if (VPT > 3u) { v.e3 = elem_even4(r3); v.o3 = elem_odd4(r3); }
    return v;
}

// stage 1 for row slot `slot`: staged bits, the partial sum and minimum of invocation t
struct Part { f: Fs, mn: u32 }
fn stage_row(slot: u32, t: u32, v: Vecs) -> Part {
    let xb = slot * RV;
    xr[xb + t] = v.r0;
    var f = fs_vec(fs_zero(), v.e0, v.o0);
    var mn = min_vec(0xffffffffu, v.r0);
    if (VPT > 1u) { xr[xb + t + RL] = v.r1; f = fs_vec(f, v.e1, v.o1); mn = min_vec(mn, v.r1); }
    if (VPT > 2u) { xr[xb + t + 2u * RL] = v.r2; f = fs_vec(f, v.e2, v.o2); mn = min_vec(mn, v.r2); }
    if (VPT > 3u) { xr[xb + t + 3u * RL] = v.r3; f = fs_vec(f, v.e3, v.o3); mn = min_vec(mn, v.r3); }
    return Part(f, mn);
}

// stage 2 for row slot `slot` (row `row`): the factor
fn row_factor(slot: u32, row: u32) -> f32 {
    let o = slot * RL;
    let a = fs_row(o);
    let m = ~atomicLoad(&pmin[slot]);
    // every square is a multiple of 2^g: the smallest nonzero value's exponent, less the
    // element's significand bits (a zero row: no value)
    let g = 2 * unit_exp(m + 1u);
    let fast = fs_f32(a, g, m == 0xffffffffu);
    var ssq: f32;
    if (fast.y != 0u) { ssq = bitcast<f32>(fast.x); } else { ssq = slow_sum(slot * RV); }
    // ss / hd: for hd = 2^k the product ss * 2^-k is exact while it is a normal float32 (a
    // biased exponent of ss above k; zeros, infinities and NaN come out as the quotient's)
    let sb = (bitcast<u32>(ssq) >> 23u) & 0xffu;
    let hk = 127u - ((bitcast<u32>(P.inv_hd) >> 23u) & 0xffu); // k
    var sh: f32;
    if (P.inv_hd != 0.0 && (sb > hk || ssq == 0.0 || sb == 255u)) { sh = mul32(ssq, P.inv_hd); }
    else { sh = div_rn(ssq, f32(P.hd)); }
    var rq = qk_factor(add32(sh, P.eps)); // 1 / sqrt(v), both steps rounded to nearest
    if (min(row, P.rows - 1u) % (P.heads + 1u) != P.heads) { rq = rt_q(rq); } // query: rounded to T
    return rq;
}

// stage 3 (kv rows with fp8) and stage 4
fn row_max(w: Row, t: u32, v: Vecs) {
    let nv = P.hd / VE;
    if (t < nv) { kv_max(w, t, v.e0, v.o0); }
    if (VPT > 1u && t + RL < nv) { kv_max(w, t + RL, v.e1, v.o1); }
    if (VPT > 2u && t + 2u * RL < nv) { kv_max(w, t + 2u * RL, v.e2, v.o2); }
    if (VPT > 3u && t + 3u * RL < nv) { kv_max(w, t + 3u * RL, v.e3, v.o3); }
}
fn row_out(a: RowAt, w: Row, t: u32, v: Vecs) {
    let nv = P.hd / VE;
    if (t < nv) { store_vec(a.is_kv, a.ob + t, out_vec(w, t, v.e0, v.o0)); }
    if (VPT > 1u && t + RL < nv) { store_vec(a.is_kv, a.ob + t + RL, out_vec(w, t + RL, v.e1, v.o1)); }
    if (VPT > 2u && t + 2u * RL < nv) { store_vec(a.is_kv, a.ob + t + 2u * RL, out_vec(w, t + 2u * RL, v.e2, v.o2)); }
    if (VPT > 3u && t + 3u * RL < nv) { store_vec(a.is_kv, a.ob + t + 3u * RL, out_vec(w, t + 3u * RL, v.e3, v.o3)); }
}

// QR * RS row slots per workgroup: invocation t of group g (RL invocations) serves the slots
// g * RS .. g * RS + RS - 1 (RS = 1 or 2: two rows per invocation keep twice the loads in flight)
@compute @workgroup_size(RL * QR)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = lid % RL;
    let s0 = (lid / RL) * RS; // the invocation's first slot
    let wg0 = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * (QR * RS); // the workgroup's first row
    let a0 = row_at(wg0 + s0);
    let v0 = load_row(a0, t);
    var a1 = a0;
    var v1 = v0;
    if (RS > 1u) {
        a1 = row_at(wg0 + s0 + 1u);
        v1 = load_row(a1, t);
    }
    // 1. staging and partial sums
    let p0 = stage_row(s0, t, v0);
    part[s0 * RL + t] = p0.f;
    atomicMax(&pmin[s0], ~p0.mn);
    if (RS > 1u) {
        let p1 = stage_row(s0 + 1u, t, v1);
        part[(s0 + 1u) * RL + t] = p1.f;
        atomicMax(&pmin[s0 + 1u], ~p1.mn);
    }
    workgroupBarrier();

    // 2. the sum of squares and the factor, once per row
    if (lid < QR * RS) { factor[lid] = row_factor(lid, wg0 + lid); }
    workgroupBarrier();
    let f0 = factor[s0];
    let w0 = Row(a0.is_kv, a0.is_kv && P.fp8 != 0u, f0, s0, a0.cb, a0.sb, win_of(f0));
    var w1 = w0;
    if (RS > 1u) {
        let f1 = factor[s0 + 1u];
        w1 = Row(a1.is_kv, a1.is_kv && P.fp8 != 0u, f1, s0 + 1u, a1.cb, a1.sb, win_of(f1));
    }

    // 3. the kv rows' fp8 block maxima
    if (w0.fp8) { row_max(w0, t, v0); }
    if (RS > 1u && w1.fp8) { row_max(w1, t, v1); }
    if (P.fp8 != 0u) { workgroupBarrier(); }

    // 4. scale, fp8 round trip (kv), rotation, one store per vector
    if (a0.valid) { row_out(a0, w0, t, v0); }
    if (RS > 1u && a1.valid) { row_out(a1, w1, t, v1); }
}
