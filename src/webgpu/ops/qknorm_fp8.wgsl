// qknorm_fp8.wgsl — the FP8 block scale and E4M3 rounding of QKNormRotaryEmbedding, shared by
// the general kernel (qknorm.wgsl) and the row kernel (qknorm_row.wgsl).

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
