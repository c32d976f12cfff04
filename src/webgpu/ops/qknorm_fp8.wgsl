// qknorm_fp8.wgsl — the FP8 block scale and E4M3 rounding of QKNormRotaryEmbedding, shared by
// the general kernel (qknorm.wgsl) and the row kernel (qknorm_row.wgsl). On the bits wherever a
// value may leave float32's normal range (a subnormal may be flushed by the adapter).

// max(m, |v|) for the block maximum, NaN skipped (the CPU's fmaxf), on the bits: the order of
// nonnegative floats is the order of their bits
fn max_abs(m: f32, v: f32) -> f32 {
    if (is_nan32(v)) { return m; }
    return bits_f32(max(bitcast<u32>(m), bitcast<u32>(v) & 0x7fffffffu));
}
fn max_pos(a: f32, b: f32) -> f32 { return bits_f32(max(bitcast<u32>(a), bitcast<u32>(b))); } // a, b >= 0

// 2^ceil(log2(ratio)) for ratio = max(amax / 448, 1e-30), from the exponent bits (the CPU computes
// log2 with logf; the two differ only for ratios within a few ulps above a power of two);
// infinity for an infinite amax, as the CPU's exp2f(ceilf(inf)).
fn fp8_block_scale(amax: f32) -> f32 {
    if (bitcast<u32>(amax) == 0u) { return 1.0; }
    let ratio = max_pos(div_rn(amax, 448.0), 1e-30);
    let bits = bitcast<u32>(ratio);
    var e = i32((bits >> 23u) & 0xffu) - 127;
    if ((bits & 0x7fffffu) != 0u && e < 128) { e = e + 1; }
    return bitcast<f32>(u32(e + 127) << 23u);
}

// E4M3 rounding of v (|v| <= 448, or NaN) on the bits, as the CPU's frexpf / nearbyintf / ldexpf:
// 3 stored significand bits (a step 2^q, q = frexp exponent - 4), smallest step 2^-9, ties to
// even; a result of 0 keeps v's sign.
fn e4m3_round(v: f32) -> f32 {
    let u = bitcast<u32>(v);
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u || a == 0u) { return v; }
    let E = a >> 23u; // 0: subnormal
    let m = select(a, (a & 0x7fffffu) | 0x800000u, E != 0u); // v = m * 2^(max(E, 1) - 150)
    let q = max(i32(E) - 130, -9);
    let sh = u32(q - (i32(max(E, 1u)) - 150)); // bits below the step: 20 or more
    var r = 0u;
    if (sh < 25u) { // else below half a step
        r = m >> sh;
        let rem = m - (r << sh);
        let half = 1u << (sh - 1u);
        if (rem > half || (rem == half && (r & 1u) == 1u)) { r = r + 1u; }
    }
    if (r == 0u) { return bits_f32(u & 0x80000000u); }
    let L = 31u - countLeadingZeros(r); // r * 2^q (r <= 16, q >= -9): a normal float, exact
    return bits_f32((u & 0x80000000u) | (u32(q + i32(L) + 127) << 23u) | ((r << (23u - L)) & 0x7fffffu));
}

// the CPU's rk_e4m3_round(fminf(fmaxf(v / scale, -448), 448)) * scale (a NaN becomes -448):
// v / scale exact for the power of two scale (v * 2^-k, on the bits where it leaves the normal
// range; for an infinite scale 0, or NaN for an infinite v)
fn fp8_quant(v: f32, scale: f32) -> f32 {
    let us = bitcast<u32>(scale);
    let uv = bitcast<u32>(v);
    var q = bitcast<u32>(mul32(v, bits_f32(254u * 0x800000u - us)));
    if (us == 0x7f800000u) { q = select(uv & 0x80000000u, QNAN, (uv & 0x7fffffffu) >= 0x7f800000u); }
    if ((q & 0x7fffffffu) > 0x7f800000u) { q = 0xc3e00000u; }                        // -448
    else if ((q & 0x7fffffffu) > 0x43e00000u) { q = (q & 0x80000000u) | 0x43e00000u; } // +-448
    return mul32(e4m3_round(bits_f32(q)), scale);
}
