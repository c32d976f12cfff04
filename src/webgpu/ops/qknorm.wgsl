// qknorm.wgsl — QKNormRotaryEmbedding (DeepSeek-V4 MLA): RMS norm of every query head and of the
// kv row, fp8 E4M3 block simulation of the kv's leading channels, rotation of the trailing
// pre-interleaved rope_head_dim channels. ropekit.h 3.4 has the contract; src/cpu/ref.c the
// reference this kernel reproduces operation for operation.
//
// Prelude (src/webgpu/ops.c): WG = 64, SW (1, or 2 for packed 16-bit), accessors ld_q/ld_kv,
// rt_q (round to T), st2_qo/st2_kvo, ld_w, ld_c, ld_s (float32), and the arithmetic of the
// device: with shader-f64 dot2 (arith_wide64.wgsl) and the f64 accumulator Acc, div_rn, sqrt_rn
// (round64.wgsl); without it the same operations in integer arithmetic (arith_exact32.wgsl,
// round32.wgsl). Both give the CPU's bits.
//
// One workgroup = 4 rows x 16 lanes. Lane l sums the squares of channels l, l+16, ... in double
// (Acc) and the 16 partial sums are combined by the CPU's butterfly (8, 4, 2, 1): its exact order.
//
// Two paths with the same arithmetic in the same order (so the same bits):
// - qk_fast (QK_FAST, set by the host for the wide64 arithmetic, and head_dim <= 16 * MAXL): the
//   rows are staged in workgroup memory as float (each lane issues all its loads at once, no
//   dependent load per step, and the input is read once), scaled there, and stored from there;
//   only the kv row looks for fp8 block maxima, by scanning its staged blocks (no barrier pair
//   per block for every row).
// - qk_general: any head_dim, a load per step and a scan per block (the exact32 arithmetic uses it
//   too: unrolling its integer sums 32 times makes shader compiles very slow on software adapters).

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

var<workgroup> lanes: array<Acc, 64>;
var<workgroup> block_max: array<f32, 64>;
const MAXL: u32 = 32u;                      // channels per lane held by qk_fast: head_dim <= 512
var<workgroup> rowbuf: array<f32, 2048>;    // qk_fast: the 4 rows staged as float

// One row of the dispatch: a query head or the kv row of token (b, s).
struct Row { valid: bool, is_kv: bool, b: u32, s: u32, ib: u32, istep: u32, ob: u32, ostep: u32 }

fn load_in(is_kv: bool, e: u32) -> f32 {
    if (is_kv) { return ld_kv(e); }
    return ld_q(e);
}

fn store_out(is_kv: bool, e: u32, step: u32, v0: f32, v1: f32) {
    if (is_kv) { st2_kvo(e, step, v0, v1); } else { st2_qo(e, step, v0, v1); }
}

// 2^ceil(log2(ratio)) for ratio = max(amax / 448, 1e-30), from the exponent bits (the CPU computes
// log2 with logf; the two differ only for ratios within a few ulps above a power of two).
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

fn row_of(row: u32) -> Row {
    let valid = row < P.rows;
    let r = min(row, P.rows - 1u);
    let tok = r / (P.heads + 1u);
    let j = r % (P.heads + 1u);
    let is_kv = j == P.heads;
    let b = tok / P.S;
    let s = tok % P.S;
    if (is_kv) {
        return Row(valid, true, b, s, P.kv_base + b * P.kvs.x + s * P.kvs.y, P.kvs.z,
                   P.kvo_base + b * P.kvos.x + s * P.kvos.y, P.kvos.z);
    }
    return Row(valid, false, b, s, P.q_base + b * P.qs.x + s * P.qs.y + j * P.qs.z, P.qs.w,
               P.qo_base + b * P.qos.x + s * P.qos.y + j * P.qos.z, P.qos.w);
}

// The 16 lanes' partial sums of the row of `slot` combined by the CPU's butterfly, then the
// normalisation factor 1 / sqrt(ss / hd + eps), rounded to T for a query head.
fn norm_factor(acc: Acc, lid: u32, lane: u32, slot: u32, is_kv: bool) -> f32 {
    lanes[lid] = acc;
    workgroupBarrier();
    for (var width = 8u; width >= 1u; width = width / 2u) {
        if (lane < width) { lanes[lid] = acc_add(lanes[lid], lanes[lid + width]); }
        workgroupBarrier();
    }
    let ss = acc_f32(lanes[slot * 16u]);
    var rq = div_rn(1.0, sqrt_rn(div_rn(ss, f32(P.hd)) + P.eps));
    if (!is_kv) { rq = rt_q(rq); } // the query's factor is rounded to T, the kv's is not
    return rq;
}

// A nope channel c of input value x scaled by the row's factor (and, for kv, the norm weight).
fn nope_value(w: Row, c: u32, x: f32, rq: f32) -> f32 {
    if (w.is_kv) { return rt_q((x * rq) * ld_w(P.w_base + c * P.w_s)); }
    return rt_q(x * rq);
}

// as the CPU's fminf(fmaxf(v / scale, -448), 448) and E4M3 rounding: a NaN becomes -448
fn fp8_quant(v: f32, scale: f32, inv: f32) -> f32 {
    let q = select(min(max(v * inv, -448.0), 448.0), -448.0, is_nan32(v));
    return e4m3_round(q) * scale;
}

// trailing rope channels: pairs (t, t+1), t even, rotated with the double arithmetic (dot2)
fn rope_part(w: Row, lane: u32, rq: f32) {
    if (!w.valid) { return; }
    for (var t = 2u * lane; t < P.rope; t += 32u) {
        let c = P.nope + t;
        var x0 = load_in(w.is_kv, w.ib + c * w.istep);
        var x1 = load_in(w.is_kv, w.ib + (c + 1u) * w.istep);
        if (w.is_kv) {
            x0 = rt_q((x0 * rq) * ld_w(P.w_base + c * P.w_s));
            x1 = rt_q((x1 * rq) * ld_w(P.w_base + (c + 1u) * P.w_s));
        } else {
            x0 = rt_q(x0 * rq);
            x1 = rt_q(x1 * rq);
        }
        let cb = P.c_base + w.b * P.cs.x + w.s * P.cs.y;
        let sb = P.s_base + w.b * P.ss.x + w.s * P.ss.y;
        let c0 = ld_c(cb + t * P.cs.z);
        let c1 = ld_c(cb + (t + 1u) * P.cs.z);
        let s0 = ld_s(sb + t * P.ss.z);
        let s1 = ld_s(sb + (t + 1u) * P.ss.z);
        store_out(w.is_kv, w.ob + c * w.ostep, w.ostep, dot2(x0, c0, -x1, s0), dot2(x1, c1, x0, s1));
    }
}

// Lane's channel i (0..3) of the nope block at b0: SW 1: l, l+16, l+32, l+48; SW 2: 2l, 2l+1,
// 2l+32, 2l+33 (whole words).
fn block_channel(b0: u32, lane: u32, i: u32) -> u32 {
    if (SW == 2u) { return b0 + 2u * lane + (i & 1u) + 32u * (i >> 1u); }
    return b0 + lane + 16u * i;
}

fn store_block(w: Row, b0: u32, lane: u32, v: array<f32, 4>) {
    if (!w.valid) { return; }
    if (SW == 2u) {
        for (var i = 0u; i < 4u; i += 2u) {
            let c = b0 + 2u * lane + 32u * (i >> 1u);
            if (c < P.nope) { store_out(w.is_kv, w.ob + c * w.ostep, w.ostep, v[i], v[i + 1u]); }
        }
    } else {
        for (var i = 0u; i < 4u; i++) {
            let c = b0 + lane + 16u * i;
            if (c < P.nope) { store_out(w.is_kv, w.ob + c * w.ostep, 0u, v[i], v[i]); }
        }
    }
}

fn qk_general(w: Row, lid: u32, lane: u32, slot: u32) {
    // sum of squares in the CPU's sixteen-lane order
    var acc = acc_zero();
    if (w.valid) {
        for (var c = lane; c < P.hd; c += 16u) { acc = acc_add_sq(acc, load_in(w.is_kv, w.ib + c * w.istep)); }
    }
    let rq = norm_factor(acc, lid, lane, slot, w.is_kv);

    // leading nope channels, in blocks of 64 (the fp8 blocks)
    for (var b0 = 0u; b0 < P.nope; b0 += 64u) {
        var v: array<f32, 4>;
        var amax: f32 = 0.0;
        for (var i = 0u; i < 4u; i++) {
            let c = block_channel(b0, lane, i);
            v[i] = 0.0;
            if (w.valid && c < P.nope) {
                v[i] = nope_value(w, c, load_in(w.is_kv, w.ib + c * w.istep), rq);
                if (!is_nan32(v[i])) { amax = max(amax, abs(v[i])); }
            }
        }
        if (P.fp8 != 0u) {
            block_max[lid] = amax;
            workgroupBarrier();
            var m: f32 = 0.0;
            for (var l = 0u; l < 16u; l++) { m = max(m, block_max[slot * 16u + l]); }
            workgroupBarrier();
            if (w.is_kv) {
                let scale = fp8_block_scale(m);
                let inv = bitcast<f32>(254u * 0x800000u - bitcast<u32>(scale)); // 1/scale, a power of 2
                for (var i = 0u; i < 4u; i++) { v[i] = fp8_quant(v[i], scale, inv); }
            }
        }
        store_block(w, b0, lane, v);
    }
    rope_part(w, lane, rq);
}

fn qk_fast(w: Row, lid: u32, lane: u32, slot: u32) {
    let base = slot * 16u * MAXL; // the row's staging area
    // every channel of the lane (l, l+16, ...) loaded at once into the staging row, then summed
    // in the CPU's order (each lane reads back only what it wrote: no barrier needed)
    for (var i = 0u; i < MAXL; i++) {
        let c = lane + 16u * i;
        if (w.valid && c < P.hd) { rowbuf[base + c] = load_in(w.is_kv, w.ib + c * w.istep); }
    }
    var acc = acc_zero();
    for (var i = 0u; i < MAXL; i++) {
        let c = lane + 16u * i;
        if (w.valid && c < P.hd) { acc = acc_add_sq(acc, rowbuf[base + c]); }
    }
    let rq = norm_factor(acc, lid, lane, slot, w.is_kv);
    // the lane's nope channels scaled in place (the rope channels keep x)
    for (var i = 0u; i < MAXL; i++) {
        let c = lane + 16u * i;
        if (w.valid && c < P.nope) { rowbuf[base + c] = nope_value(w, c, rowbuf[base + c], rq); }
    }
    workgroupBarrier(); // the row is visible to all its lanes
    if (!w.valid) { return; }
    // trailing rope channels: pairs (t, t+1), t even, x from the staging row
    for (var t = 2u * lane; t < P.rope; t += 32u) {
        let c = P.nope + t;
        var x0 = rowbuf[base + c];
        var x1 = rowbuf[base + c + 1u];
        if (w.is_kv) {
            x0 = rt_q((x0 * rq) * ld_w(P.w_base + c * P.w_s));
            x1 = rt_q((x1 * rq) * ld_w(P.w_base + (c + 1u) * P.w_s));
        } else {
            x0 = rt_q(x0 * rq);
            x1 = rt_q(x1 * rq);
        }
        let cb = P.c_base + w.b * P.cs.x + w.s * P.cs.y;
        let sb = P.s_base + w.b * P.ss.x + w.s * P.ss.y;
        let c0 = ld_c(cb + t * P.cs.z);
        let c1 = ld_c(cb + (t + 1u) * P.cs.z);
        let s0 = ld_s(sb + t * P.ss.z);
        let s1 = ld_s(sb + (t + 1u) * P.ss.z);
        store_out(w.is_kv, w.ob + c * w.ostep, w.ostep, dot2(x0, c0, -x1, s0), dot2(x1, c1, x0, s1));
    }
    // leading nope channels in blocks of 64; the kv row's fp8 block maxima by a scan of the
    // staged block (max is exact in any order; one row in heads + 1)
    for (var b0 = 0u; b0 < P.nope; b0 += 64u) {
        var v: array<f32, 4>;
        for (var i = 0u; i < 4u; i++) {
            let c = block_channel(b0, lane, i);
            v[i] = select(0.0, rowbuf[base + min(c, 16u * MAXL - 1u)], c < P.nope);
        }
        if (P.fp8 != 0u && w.is_kv) {
            var m: f32 = 0.0;
            for (var c = b0; c < min(b0 + 64u, P.nope); c++) {
                let x = rowbuf[base + c];
                if (!is_nan32(x)) { m = max(m, abs(x)); }
            }
            let scale = fp8_block_scale(m);
            let inv = bitcast<f32>(254u * 0x800000u - bitcast<u32>(scale)); // 1/scale, a power of 2
            for (var i = 0u; i < 4u; i++) { v[i] = fp8_quant(v[i], scale, inv); }
        }
        store_block(w, b0, lane, v);
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let slot = lid / 16u;
    let lane = lid % 16u;
    let w = row_of(((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 4u + slot);
    if (QK_FAST && P.hd <= 16u * MAXL) { qk_fast(w, lid, lane, slot); }
    else { qk_general(w, lid, lane, slot); }
}
