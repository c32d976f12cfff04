// round32.wgsl — correctly rounded float32 division and square root in integers (WGSL only
// promises 2.5 ulp for f32 division and inherits sqrt's accuracy from inverseSqrt): the
// significands are divided / square-rooted bit by bit in u32 integers with a sticky remainder
// and rounded once by pack_f32 (exact_f32.wgsl), as IEEE 754 prescribes. IEEE special values
// (zeros, infinities, NaN) are handled first. div_rn_int / sqrt_rn_int are div_rn / sqrt_rn
// without shader-f64 (kernels.c) and round64.wgsl's path for operands or results outside the
// normal range.

// x = m * 2^e with 2^23 <= m < 2^24 (x finite, nonzero, sign ignored)
fn f32_unpack(x: f32) -> vec2<i32> {
    let u = bitcast<u32>(x) & 0x7fffffffu;
    let be = u >> 23u;
    if (be == 0u) { // subnormal: normalize
        let sh = countLeadingZeros(u) - 8u;
        return vec2<i32>(i32(u << sh), -149 - i32(sh));
    }
    return vec2<i32>(i32((u & 0x7fffffu) | 0x800000u), i32(be) - 150);
}

fn div_rn_int(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let s = (ua ^ ub) & 0x80000000u;
    let aa = ua & 0x7fffffffu;
    let ab = ub & 0x7fffffffu;
    let nan = bits_f32(0x7fc00000u);
    if (aa > 0x7f800000u || ab > 0x7f800000u) { return nan; }
    if (aa == 0x7f800000u) { return select(bitcast<f32>(s | 0x7f800000u), nan, ab == 0x7f800000u); }
    if (ab == 0x7f800000u) { return bitcast<f32>(s); }
    if (ab == 0u) { return select(bitcast<f32>(s | 0x7f800000u), nan, aa == 0u); }
    if (aa == 0u) { return bitcast<f32>(s); }
    let A = f32_unpack(a);
    let Bv = f32_unpack(b);
    let mb = u32(Bv.x);
    var r = u32(A.x);
    var q = 0u;
    for (var i = 0u; i < 26u; i++) { // q = floor(ma * 2^25 / mb), 25 or 26 bits
        q = q << 1u;
        if (r >= mb) {
            r = r - mb;
            q = q | 1u;
        }
        r = r << 1u;
    }
    let m = vec2<u32>(0u, (q << 1u) | select(0u, 1u, r != 0u));
    return pack_f32(m, A.y - Bv.y - 26, s >> 31u);
}

fn sqrt_rn_int(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) == 0u) { return x; }             // +-0
    if (u > 0x80000000u || u > 0x7f800000u) { return bits_f32(0x7fc00000u); } // x < 0, NaN
    if (u == 0x7f800000u) { return x; }                     // +inf
    let X = f32_unpack(x);
    var m = u32(X.x);
    var e = X.y;
    if ((e & 1) != 0) { // make the exponent even
        m = m << 1u;
        e = e - 1;
    }
    // M = m * 2^28 (below 2^53); root = floor(sqrt(M)) bit by bit, two radicand bits a step
    let M = u64_shl(vec2<u32>(0u, m), 28u);
    var res = 0u;
    var rem = 0u;
    for (var i = 27; i > 0; i--) {
        let pos = u32(2 * (i - 1));
        let pair = u64_shr(M, pos).y & 3u;
        rem = (rem << 2u) | pair;
        let trial = (res << 2u) | 1u;
        if (rem >= trial) {
            rem = rem - trial;
            res = (res << 1u) | 1u;
        } else {
            res = res << 1u;
        }
    }
    let mm = vec2<u32>(0u, (res << 1u) | select(0u, 1u, rem != 0u));
    return pack_f32(mm, (e - 28) / 2 - 1, 0u);
}
