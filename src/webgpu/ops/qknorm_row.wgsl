// qknorm_row.wgsl — QKNormRotaryEmbedding, the row kernel: the same operations in the same order
// as qknorm.wgsl (and src/cpu/ref.c), for rows the host can read as 16-byte vectors (unit channel
// stride, head_dim and every row start a multiple of VE elements, head_dim <= 64 * VPT * VE).
//
// Prelude (kernels.c): the arithmetic (Acc, div_rn, sqrt_rn, dot2), VE (elements per vector: 4
// or 8), VPT (vectors per invocation), QR (rows per workgroup), elem_to_f32 / f32_to_elem,
// rt_q, ld4_q / ld4_kv (array<vec4<u32>>), st4_qo / st4_kvo, ld_w, ld_c, ld_s (float32).
//
// One row (a query head or the kv row of a token) = 64 invocations of the workgroup; invocation
// t owns vectors t, t + 64, ... of the row. Stages:
//   1. every vector of the row loaded at once (one 16-byte load each), widened to float and
//      staged in workgroup memory (`xs`);
//   2. invocation l < 16 of the row sums the squares of channels l, l + 16, ... in its Acc:
//      the CPU's lane l, in its order;
//   3. one invocation per row combines the 16 lanes by the CPU's butterfly (8, 4, 2, 1) and
//      computes the factor 1 / sqrt(ss / hd + eps) (rounded to T for a query head);
//   4. the kv row (with fp8) puts the maximum |scaled value| of each nope vector in `vmax`;
//   5. each invocation scales its channels again from `xs`, the kv row's fp8 blocks take their
//      maxima from `vmax`, the rope channels take their partner from `xs`, and each vector is
//      stored with one 16-byte store.

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
    eps: f32, pad0: u32, pad1: u32, pad2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

const RV: u32 = 64u * VPT;      // vectors per row slot
const RC: u32 = RV * VE;        // channels per row slot
var<workgroup> xs: array<vec4<f32>, QR * RC / 4u>; // the rows' inputs as float
var<workgroup> lanes: array<Acc, QR * 16u>;
var<workgroup> factor: array<f32, QR>;
var<workgroup> vmax: array<f32, QR * RV>;          // fp8: max |v| of each nope vector

// 2^ceil(log2(ratio)) for ratio = max(amax / 448, 1e-30), from the exponent bits (as qknorm.wgsl)
fn fp8_block_scale(amax: f32) -> f32 {
    if (!(amax > 0.0)) { return 1.0; }
    let ratio = max(div_rn(amax, 448.0), 1e-30);
    let bits = bitcast<u32>(ratio);
    var e = i32((bits >> 23u) & 0xffu) - 127;
    if ((bits & 0x7fffffu) != 0u) { e = e + 1; }
    return bitcast<f32>(u32(e + 127) << 23u);
}

// E4M3 rounding of v (|v| <= 448): 3 stored significand bits, smallest step 2^-9, ties to even.
fn e4m3_round(v: f32) -> f32 {
    if (is_nan32(v) || v == 0.0) { return v; }
    let av = abs(v);
    let bits = bitcast<u32>(av);
    var q = i32((bits >> 23u) & 0xffu) - 127 + 1 - 4; // frexp exponent minus 4
    if (q < -9) { q = -9; }
    let down = bitcast<f32>(u32(127 - q) << 23u);     // 2^-q (exact)
    let up = bitcast<f32>(u32(127 + q) << 23u);       // 2^q
    let r = round(av * down) * up;                    // round(): ties to even
    return select(r, -r, v < 0.0);
}

fn xs_at(i: u32) -> f32 { return xs[i >> 2u][i & 3u]; }

// element e of a 16-byte vector as float, and a vector of VE floats narrowed back
fn elem_of(w: vec4<u32>, e: u32) -> f32 {
    if (VE == 4u) { return elem_to_f32(w[e]); }
    return elem_to_f32((w[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu);
}
fn narrow(y: array<f32, 8>) -> vec4<u32> {
    if (VE == 4u) { return vec4<u32>(f32_to_elem(y[0]), f32_to_elem(y[1]), f32_to_elem(y[2]), f32_to_elem(y[3])); }
    return vec4<u32>(f32_to_elem(y[0]) | (f32_to_elem(y[1]) << 16u), f32_to_elem(y[2]) | (f32_to_elem(y[3]) << 16u),
                     f32_to_elem(y[4]) | (f32_to_elem(y[5]) << 16u), f32_to_elem(y[6]) | (f32_to_elem(y[7]) << 16u));
}

// channel c of the row scaled: Rt(x * r) for a query head, Rt((x * r) * w[c]) for kv
fn normed(is_kv: bool, c: u32, x: f32, rq: f32) -> f32 {
    if (is_kv) { return rt_q((x * rq) * ld_w(P.w_base + c * P.w_s)); }
    return rt_q(x * rq);
}

@compute @workgroup_size(64 * QR)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let slot = lid / 64u;
    let t = lid % 64u;
    let row = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * QR + slot;
    let valid = row < P.rows;
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
    ib = ib / VE; // the host checked: multiples of VE
    ob = ob / VE;
    let nv = P.hd / VE;
    let xb = slot * (RC / 4u); // the slot's first vec4 of xs

    // 1. all loads first, then widen into workgroup memory
    var raw: array<vec4<u32>, VPT>;
    for (var i = 0u; i < VPT; i++) {
        let vi = t + 64u * i;
        raw[i] = vec4<u32>(0u);
        if (valid && vi < nv) {
            if (is_kv) { raw[i] = ld4_kv(ib + vi); } else { raw[i] = ld4_q(ib + vi); }
        }
    }
    for (var i = 0u; i < VPT; i++) {
        let vi = t + 64u * i;
        let w = raw[i];
        if (VE == 4u) {
            xs[xb + vi] = vec4<f32>(elem_of(w, 0u), elem_of(w, 1u), elem_of(w, 2u), elem_of(w, 3u));
        } else {
            xs[xb + 2u * vi] = vec4<f32>(elem_of(w, 0u), elem_of(w, 1u), elem_of(w, 2u), elem_of(w, 3u));
            xs[xb + 2u * vi + 1u] = vec4<f32>(elem_of(w, 4u), elem_of(w, 5u), elem_of(w, 6u), elem_of(w, 7u));
        }
    }
    workgroupBarrier();

    // 2. the CPU's sixteen lanes, each in its order
    if (t < 16u) {
        var acc = acc_zero();
        for (var c = t; c < P.hd; c += 16u) { acc = acc_add_sq(acc, xs_at(xb * 4u + c)); }
        lanes[slot * 16u + t] = acc;
    }
    workgroupBarrier();

    // 3. the butterfly and the factor, once per row
    if (lid < QR) {
        var l: array<Acc, 16>;
        for (var k = 0u; k < 16u; k++) { l[k] = lanes[lid * 16u + k]; }
        for (var k = 0u; k < 8u; k++) { l[k] = acc_add(l[k], l[k + 8u]); }
        for (var k = 0u; k < 4u; k++) { l[k] = acc_add(l[k], l[k + 4u]); }
        for (var k = 0u; k < 2u; k++) { l[k] = acc_add(l[k], l[k + 2u]); }
        let ssq = acc_f32(acc_add(l[0], l[1]));
        var rq = div_rn(1.0, sqrt_rn(div_rn(ssq, f32(P.hd)) + P.eps));
        let rrow = min(((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * QR + lid, P.rows - 1u);
        if (rrow % (P.heads + 1u) != P.heads) { rq = rt_q(rq); } // query: rounded to T; kv: not
        factor[lid] = rq;
    }
    workgroupBarrier();
    let rq = factor[slot];

    // 4. the kv row's fp8 blocks: the maxima of its nope vectors (scaled values, NaN skipped)
    let fp8 = is_kv && P.fp8 != 0u;
    if (fp8) {
        for (var i = 0u; i < VPT; i++) {
            let vi = t + 64u * i;
            var m: f32 = 0.0;
            for (var e = 0u; e < VE; e++) {
                let c = vi * VE + e;
                if (c < P.nope) {
                    let y = normed(true, c, xs_at(xb * 4u + c), rq);
                    if (!is_nan32(y)) { m = max(m, abs(y)); }
                }
            }
            vmax[slot * RV + vi] = m;
        }
    }
    if (P.fp8 != 0u) { workgroupBarrier(); }

    // 5. each vector: scale, fp8 round trip (kv), rotation (rope channels), one store
    for (var i = 0u; i < VPT; i++) {
        let vi = t + 64u * i;
        let c0 = vi * VE;
        var y: array<f32, 8>;
        for (var e = 0u; e < VE; e++) {
            if (c0 + e < P.hd) { y[e] = normed(is_kv, c0 + e, xs_at(xb * 4u + c0 + e), rq); }
        }
        if (fp8 && c0 < P.nope) { // the vector's block: channels [64 k, 64 k + 64), 64 / VE vectors
            let first = (c0 / 64u) * (64u / VE);
            var bm: f32 = 0.0;
            for (var k = 0u; k < 64u / VE; k++) { bm = max(bm, vmax[slot * RV + min(first + k, RV - 1u)]); }
            let scale = fp8_block_scale(bm);
            let inv = bitcast<f32>(254u * 0x800000u - bitcast<u32>(scale)); // 1/scale, a power of 2
            for (var e = 0u; e < VE; e++) {
                // as the CPU's fminf(fmaxf(v / scale, -448), 448): a NaN becomes -448
                let q = select(min(max(y[e] * inv, -448.0), 448.0), -448.0, is_nan32(y[e]));
                y[e] = e4m3_round(q) * scale;
            }
        }
        if (c0 + VE > P.nope && P.rope > 0u) { // rope channels: pairs (t, t+1), t even, after nope
            let cb = P.c_base + b * P.cs.x + s * P.cs.y;
            let sb = P.s_base + b * P.ss.x + s * P.ss.y;
            for (var e = 0u; e < VE; e++) {
                let c = c0 + e;
                if (c >= P.nope && c < P.hd) {
                    let tt = c - P.nope;
                    let odd = (tt & 1u) == 1u;
                    let pc = select(c + 1u, c - 1u, odd);
                    let xp = normed(is_kv, pc, xs_at(xb * 4u + pc), rq);
                    // y[t] = x[t] c[t] - x[t+1] s[t] (t even), x[t] c[t] + x[t-1] s[t] (t odd)
                    y[e] = dot2(y[e], ld_c(cb + tt * P.cs.z), select(-xp, xp, odd), ld_s(sb + tt * P.ss.z));
                }
            }
        }
        if (valid && vi < nv) {
            if (is_kv) { st4_kvo(ob + vi, narrow(y)); } else { st4_qo(ob + vi, narrow(y)); }
        }
    }
}
