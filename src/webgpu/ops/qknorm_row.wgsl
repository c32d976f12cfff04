// qknorm_row.wgsl — QKNormRotaryEmbedding, the row kernel: the same operations in the same order
// as qknorm.wgsl (and src/cpu/ref.c), for rows the host can read as 16-byte vectors (unit channel
// stride, head_dim and every row start a multiple of VE elements, head_dim <= 64 * VPT * VE; so
// nope = head_dim - rope_head_dim is even and a rotation pair never leaves its vector).
//
// Prelude (kernels.c): the arithmetic (Acc, div_rn, sqrt_rn, dot2), VE (elements per vector: 4
// or 8), VPT (vectors per invocation, 1..4), QR (rows per workgroup), elem_to_f32 / f32_to_elem,
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
//   5. each invocation scales its vectors again from `xs`, the kv row's fp8 blocks take their
//      maxima from `vmax`, rope pairs are rotated, and each vector is stored with one 16-byte
//      store.
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
    eps: f32, pad0: u32, pad1: u32, pad2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

const RV: u32 = 64u * VPT;      // vectors per row slot
const RC: u32 = RV * VE;        // channels per row slot
var<workgroup> xs: array<vec4<f32>, QR * RC / 4u>; // the rows' inputs as float
var<workgroup> lanes: array<Acc, QR * 16u>;
var<workgroup> factor: array<f32, QR>;
var<workgroup> vmax: array<f32, QR * RV>;          // fp8: max |v| of each nope vector

fn rt4(v: vec4<f32>) -> vec4<f32> { return vec4<f32>(rt_q(v.x), rt_q(v.y), rt_q(v.z), rt_q(v.w)); }
// v * s lane by lane (mul32: the hardware's product where it stays in the normal range)
fn mul4(v: vec4<f32>, s: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(mul32(v.x, s.x), mul32(v.y, s.y), mul32(v.z, s.z), mul32(v.w, s.w));
}

// channels c0 .. c0+3 (inputs x) scaled: Rt(x * r) for a query head, Rt((x * r) * w[c]) for kv
fn normed4(is_kv: bool, c0: u32, x: vec4<f32>, rq: f32) -> vec4<f32> {
    if (is_kv) {
        let w = vec4<f32>(ld_w(P.w_base + c0 * P.w_s), ld_w(P.w_base + (c0 + 1u) * P.w_s),
                          ld_w(P.w_base + (c0 + 2u) * P.w_s), ld_w(P.w_base + (c0 + 3u) * P.w_s));
        return rt4(mul4(mul4(x, vec4<f32>(rq)), w));
    }
    return rt4(mul4(x, vec4<f32>(rq)));
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
// y[t+1] = x[t+1] c[t+1] + x[t] s[t+1] (double arithmetic: dot2)
fn rot2(x0: f32, x1: f32, c: u32, cb: u32, sb: u32) -> vec2<f32> {
    let t = c - P.nope;
    let c0 = ld_c(cb + t * P.cs.z);
    let c1 = ld_c(cb + (t + 1u) * P.cs.z);
    let s0 = ld_s(sb + t * P.ss.z);
    let s1 = ld_s(sb + (t + 1u) * P.ss.z);
    return vec2<f32>(dot2(x0, c0, neg32(x1), s0), dot2(x1, c1, x0, s1));
}

// One row's state for stage 5.
struct Row { is_kv: bool, fp8: bool, rq: f32, slot: u32, xb: u32, cb: u32, sb: u32 }

// channels c0 .. c0+3 of the row, final values (c0 a multiple of 4 below hd)
fn final4(w: Row, c0: u32, x: vec4<f32>) -> vec4<f32> {
    var y = normed4(w.is_kv, c0, x, w.rq);
    if (w.fp8 && c0 < P.nope) { // the block of channels [64 k, 64 k + 64): 64 / VE vectors
        let first = w.slot * RV + (c0 / 64u) * (64u / VE);
        var bm: f32 = 0.0;
        for (var k = 0u; k < 64u / VE; k++) { bm = max_pos(bm, vmax[first + k]); }
        let scale = fp8_block_scale(bm);
        y = vec4<f32>(fp8_quant(y.x, scale), fp8_quant(y.y, scale), fp8_quant(y.z, scale),
                      fp8_quant(y.w, scale));
    }
    if (c0 + 4u > P.nope) { // rope pairs (nope is even: pairs start at even channels)
        if (c0 >= P.nope) {
            let a = rot2(y.x, y.y, c0, w.cb, w.sb);
            y = vec4<f32>(a, y.z, y.w);
        }
        if (c0 + 2u >= P.nope) {
            let a = rot2(y.z, y.w, c0 + 2u, w.cb, w.sb);
            y = vec4<f32>(y.x, y.y, a);
        }
    }
    return y;
}

fn widen_lo(r: vec4<u32>) -> vec4<f32> {
    if (VE == 4u) { return vec4<f32>(elem_to_f32(r.x), elem_to_f32(r.y), elem_to_f32(r.z), elem_to_f32(r.w)); }
    return vec4<f32>(elem_to_f32(r.x & 0xffffu), elem_to_f32(r.x >> 16u),
                     elem_to_f32(r.y & 0xffffu), elem_to_f32(r.y >> 16u));
}
fn widen_hi(r: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(elem_to_f32(r.z & 0xffffu), elem_to_f32(r.z >> 16u),
                     elem_to_f32(r.w & 0xffffu), elem_to_f32(r.w >> 16u));
}
fn pack2(a: f32, b: f32) -> u32 { return f32_to_elem(a) | (f32_to_elem(b) << 16u); }

// stage 1 for vector vi: stage the loaded bits as float
fn stage_in(xb: u32, vi: u32, r: vec4<u32>) {
    if (VE == 4u) {
        xs[xb + vi] = widen_lo(r);
    } else {
        xs[xb + 2u * vi] = widen_lo(r);
        xs[xb + 2u * vi + 1u] = widen_hi(r);
    }
}

// stage 4 for vector vi of a kv row: its nope maximum
fn kv_max(w: Row, vi: u32) {
    let c0 = vi * VE;
    if (VE == 4u) {
        vmax[w.slot * RV + vi] = nope_max4(c0, normed4(true, c0, xs[w.xb + vi], w.rq));
    } else {
        vmax[w.slot * RV + vi] = max_pos(nope_max4(c0, normed4(true, c0, xs[w.xb + 2u * vi], w.rq)),
                                     nope_max4(c0 + 4u, normed4(true, c0 + 4u, xs[w.xb + 2u * vi + 1u], w.rq)));
    }
}

// stage 5 for vector vi: the stored bits
fn out_vec(w: Row, vi: u32) -> vec4<u32> {
    let c0 = vi * VE;
    if (VE == 4u) {
        let y = final4(w, c0, xs[w.xb + vi]);
        return vec4<u32>(f32_to_elem(y.x), f32_to_elem(y.y), f32_to_elem(y.z), f32_to_elem(y.w));
    }
    let lo = final4(w, c0, xs[w.xb + 2u * vi]);
    let hi = final4(w, c0 + 4u, xs[w.xb + 2u * vi + 1u]);
    return vec4<u32>(pack2(lo.x, lo.y), pack2(lo.z, lo.w), pack2(hi.x, hi.y), pack2(hi.z, hi.w));
}

fn load_vec(is_kv: bool, e: u32) -> vec4<u32> {
    if (is_kv) { return ld4_kv(e); }
    return ld4_q(e);
}
fn store_vec(is_kv: bool, e: u32, v: vec4<u32>) {
    if (is_kv) { st4_kvo(e, v); } else { st4_qo(e, v); }
}

@compute @workgroup_size(64 * QR)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let slot = lid / 64u;
    let t = lid % 64u;
    let wg0 = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * QR; // the workgroup's first row
    let row = wg0 + slot;
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

    // 1. all loads first (up to four vectors), then widen into workgroup memory
    var r0 = vec4<u32>(0u); var r1 = vec4<u32>(0u); var r2 = vec4<u32>(0u); var r3 = vec4<u32>(0u);
    if (valid) {
        if (t < nv) { r0 = load_vec(is_kv, ib + t); }
        if (VPT > 1u && t + 64u < nv) { r1 = load_vec(is_kv, ib + t + 64u); }
        if (VPT > 2u && t + 128u < nv) { r2 = load_vec(is_kv, ib + t + 128u); }
        if (VPT > 3u && t + 192u < nv) { r3 = load_vec(is_kv, ib + t + 192u); }
    }
    stage_in(xb, t, r0);
    if (VPT > 1u) { stage_in(xb, t + 64u, r1); }
    if (VPT > 2u) { stage_in(xb, t + 128u, r2); }
    if (VPT > 3u) { stage_in(xb, t + 192u, r3); }
    workgroupBarrier();

    // 2. the CPU's sixteen lanes, each in its order
    if (t < 16u) {
        var acc = acc_zero();
        let x0 = xb * 4u;
        for (var c = t; c < P.hd; c += 16u) { acc = acc_add_sq(acc, xs[(x0 + c) >> 2u][c & 3u]); }
        lanes[slot * 16u + t] = acc;
    }
    workgroupBarrier();

    // 3. the butterfly (widths 8, 4, 2, 1) and the factor, once per row
    if (lid < QR) {
        let o = lid * 16u;
        let a0 = acc_add(lanes[o], lanes[o + 8u]);
        let a1 = acc_add(lanes[o + 1u], lanes[o + 9u]);
        let a2 = acc_add(lanes[o + 2u], lanes[o + 10u]);
        let a3 = acc_add(lanes[o + 3u], lanes[o + 11u]);
        let a4 = acc_add(lanes[o + 4u], lanes[o + 12u]);
        let a5 = acc_add(lanes[o + 5u], lanes[o + 13u]);
        let a6 = acc_add(lanes[o + 6u], lanes[o + 14u]);
        let a7 = acc_add(lanes[o + 7u], lanes[o + 15u]);
        let b0 = acc_add(a0, a4);
        let b1 = acc_add(a1, a5);
        let b2 = acc_add(a2, a6);
        let b3 = acc_add(a3, a7);
        let ssq = acc_f32(acc_add(acc_add(b0, b2), acc_add(b1, b3)));
        var rq = div_rn(1.0, sqrt_rn(add32(div_rn(ssq, f32(P.hd)), P.eps)));
        if ((min(wg0 + lid, P.rows - 1u)) % (P.heads + 1u) != P.heads) { rq = rt_q(rq); } // query: rounded to T
        factor[lid] = rq;
    }
    workgroupBarrier();
    let w = Row(is_kv, is_kv && P.fp8 != 0u, factor[slot], slot, xb,
                P.c_base + b * P.cs.x + s * P.cs.y, P.s_base + b * P.ss.x + s * P.ss.y);

    // 4. the kv row's fp8 block maxima
    if (w.fp8) {
        if (t < nv) { kv_max(w, t); }
        if (VPT > 1u && t + 64u < nv) { kv_max(w, t + 64u); }
        if (VPT > 2u && t + 128u < nv) { kv_max(w, t + 128u); }
        if (VPT > 3u && t + 192u < nv) { kv_max(w, t + 192u); }
    }
    if (P.fp8 != 0u) { workgroupBarrier(); }

    // 5. scale, fp8 round trip (kv), rotation, one store per vector
    if (valid) {
        if (t < nv) { store_vec(is_kv, ob + t, out_vec(w, t)); }
        if (VPT > 1u && t + 64u < nv) { store_vec(is_kv, ob + t + 64u, out_vec(w, t + 64u)); }
        if (VPT > 2u && t + 128u < nv) { store_vec(is_kv, ob + t + 128u, out_vec(w, t + 128u)); }
        if (VPT > 3u && t + 192u < nv) { store_vec(is_kv, ob + t + 192u, out_vec(w, t + 192u)); }
    }
}
