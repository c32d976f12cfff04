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

fn load_in(is_kv: bool, e: u32) -> f32 {
    if (is_kv) { return ld_kv(e); }
    return ld_q(e);
}

fn store_out(is_kv: bool, e: u32, step: u32, v0: f32, v1: f32) {
    if (is_kv) { st2_kvo(e, step, v0, v1); } else { st2_qo(e, step, v0, v1); }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let slot = lid / 16u;
    let lane = lid % 16u;
    let row = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 4u + slot;
    let valid = row < P.rows;
    let r = min(row, P.rows - 1u);
    let tok = r / (P.heads + 1u);
    let j = r % (P.heads + 1u);
    let is_kv = j == P.heads;
    let b = tok / P.S;
    let s = tok % P.S;
    var ib: u32; var istep: u32; var ob: u32; var ostep: u32;
    if (is_kv) {
        ib = P.kv_base + b * P.kvs.x + s * P.kvs.y; istep = P.kvs.z;
        ob = P.kvo_base + b * P.kvos.x + s * P.kvos.y; ostep = P.kvos.z;
    } else {
        ib = P.q_base + b * P.qs.x + s * P.qs.y + j * P.qs.z; istep = P.qs.w;
        ob = P.qo_base + b * P.qos.x + s * P.qos.y + j * P.qos.z; ostep = P.qos.w;
    }

    // sum of squares in the CPU's sixteen-lane order
    var acc = acc_zero();
    if (valid) {
        for (var c = lane; c < P.hd; c += 16u) { acc = acc_add_sq(acc, load_in(is_kv, ib + c * istep)); }
    }
    lanes[lid] = acc;
    workgroupBarrier();
    for (var width = 8u; width >= 1u; width = width / 2u) {
        if (lane < width) { lanes[lid] = acc_add(lanes[lid], lanes[lid + width]); }
        workgroupBarrier();
    }
    let ss = acc_f32(lanes[slot * 16u]);
    var rq = div_rn(1.0, sqrt_rn(add32(div_rn(ss, f32(P.hd)), P.eps)));
    if (!is_kv) { rq = rt_q(rq); } // the query's factor is rounded to T, the kv's is not

    // leading nope channels, in blocks of 64 (the fp8 blocks); lane's channels of a block:
    // SW 1: l, l+16, l+32, l+48; SW 2: 2l, 2l+1, 2l+32, 2l+33
    for (var b0 = 0u; b0 < P.nope; b0 += 64u) {
        var v: array<f32, 4>;
        var amax: f32 = 0.0;
        for (var i = 0u; i < 4u; i++) {
            var c = b0 + lane + 16u * i;
            if (SW == 2u) { c = b0 + 2u * lane + (i & 1u) + 32u * (i >> 1u); }
            v[i] = 0.0;
            if (valid && c < P.nope) {
                let x = load_in(is_kv, ib + c * istep);
                if (is_kv) { v[i] = rt_q(mul32(mul32(x, rq), ld_w(P.w_base + c * P.w_s))); }
                else { v[i] = rt_q(mul32(x, rq)); }
                amax = max_abs(amax, v[i]);
            }
        }
        if (P.fp8 != 0u) {
            block_max[lid] = amax;
            workgroupBarrier();
            var m: f32 = 0.0;
            for (var l = 0u; l < 16u; l++) { m = max_pos(m, block_max[slot * 16u + l]); }
            workgroupBarrier();
            if (is_kv) {
                let scale = fp8_block_scale(m);
                for (var i = 0u; i < 4u; i++) { v[i] = fp8_quant(v[i], scale); }
            }
        }
        if (valid) {
            if (SW == 2u) {
                for (var i = 0u; i < 4u; i += 2u) {
                    let c = b0 + 2u * lane + 32u * (i >> 1u);
                    if (c < P.nope) { store_out(is_kv, ob + c * ostep, ostep, v[i], v[i + 1u]); }
                }
            } else {
                for (var i = 0u; i < 4u; i++) {
                    let c = b0 + lane + 16u * i;
                    if (c < P.nope) { store_out(is_kv, ob + c * ostep, 0u, v[i], v[i]); }
                }
            }
        }
    }

    // trailing rope channels: pairs (t, t+1), t even, rotated with the double arithmetic (dot2)
    if (valid) {
        for (var t = 2u * lane; t < P.rope; t += 32u) {
            let c = P.nope + t;
            var x0 = load_in(is_kv, ib + c * istep);
            var x1 = load_in(is_kv, ib + (c + 1u) * istep);
            if (is_kv) {
                x0 = rt_q(mul32(mul32(x0, rq), ld_w(P.w_base + c * P.w_s)));
                x1 = rt_q(mul32(mul32(x1, rq), ld_w(P.w_base + (c + 1u) * P.w_s)));
            } else {
                x0 = rt_q(mul32(x0, rq));
                x1 = rt_q(mul32(x1, rq));
            }
            let cb = P.c_base + b * P.cs.x + s * P.cs.y;
            let sb = P.s_base + b * P.ss.x + s * P.ss.y;
            let c0 = ld_c(cb + t * P.cs.z);
            let c1 = ld_c(cb + (t + 1u) * P.cs.z);
            let s0 = ld_s(sb + t * P.ss.z);
            let s1 = ld_s(sb + (t + 1u) * P.ss.z);
            store_out(is_kv, ob + c * ostep, ostep, dot2(x0, c0, neg32(x1), s0), dot2(x1, c1, x0, s1));
        }
    }
}
