// qknorm_factor.wgsl — the row kernel's factor 1 / sqrt(v), both steps rounded to nearest float32
// (src/cpu/ref.c: 1.0f / sqrtf(v)), for positive normal v: the adapter's float32 sqrt and
// division give candidates (any accuracy), integer arithmetic on the significands proves or moves
// them (exact: no float rounding, no fused or subnormal arithmetic); a candidate that does not
// settle within a few steps, and every other v, take div_rn / sqrt_rn.

// products: mul24 (exact_f32.wgsl), exact for factors below 2^31 (here below 2^26), as (hi, lo)
fn qf_lt(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x < b.x || (a.x == b.x && a.y < b.y); }
// m << n as 64 bits (m < 2^32, 0 <= n < 32)
fn qf_shl(m: u32, n: u32) -> vec2<u32> {
    if (n == 0u) { return vec2<u32>(0u, m); }
    return vec2<u32>(m >> (32u - n), m << n);
}
fn qf_normal(x: f32) -> bool { // positive normal finite
    let u = bitcast<u32>(x);
    return u >= 0x00800000u && u < 0x7f800000u;
}

// RN(sqrt(v)): s = ms * 2^(es) is it iff (2ms - 1)^2 < 4v / 2^(2es) < (2ms + 1)^2 (below a power
// of two the lower neighbour is half a step away: (4ms - 1)^2 < 16v / 2^(2es)); a square root of
// a float32 is never a midpoint. In integers: B = mv * 2^(ev - 2es + 2), v = mv * 2^ev.
fn qf_sqrt(v: f32) -> f32 {
    if (!qf_normal(v)) { return sqrt_rn(v); }
    let uv = bitcast<u32>(v);
    let mv = (uv & 0x7fffffu) | 0x800000u;
    let ev = i32(uv >> 23u) - 150;
    var s = sqrt(v);
    for (var i = 0u; i < 4u; i++) {
        if (!qf_normal(s)) { break; }
        let us = bitcast<u32>(s);
        let ms = (us & 0x7fffffu) | 0x800000u;
        let es = i32(us >> 23u) - 150;
        let d = ev - 2 * es + 2; // about 24 .. 27 for a candidate near the root
        if (d < 2 || d > 29) { break; }
        let B = qf_shl(mv, u32(d));
        let hi = mul24(2u * ms + 1u, 2u * ms + 1u);
        if (!qf_lt(B, hi)) { s = bitcast<f32>(us + 1u); continue; }
        var below: bool;
        if (ms == 0x800000u) {
            let B4 = vec2<u32>((B.x << 2u) | (B.y >> 30u), B.y << 2u);
            below = qf_lt(B4, mul24(4u * ms - 1u, 4u * ms - 1u));
        } else {
            below = qf_lt(B, mul24(2u * ms - 1u, 2u * ms - 1u));
        }
        if (below) { s = bitcast<f32>(us - 1u); continue; }
        return s;
    }
    return sqrt_rn(v);
}

// RN(1/s): r = mr * 2^er is it iff (2mr - 1) * ms < 2^E < (2mr + 1) * ms, E = 1 - er - es,
// s = ms * 2^es (below a power of two: (4mr - 1) * ms < 2^(E + 1)); never a midpoint for
// ms >= 2^23.
fn qf_recip(s: f32) -> f32 {
    if (!qf_normal(s)) { return div_rn(1.0, s); }
    let us = bitcast<u32>(s);
    let ms = (us & 0x7fffffu) | 0x800000u;
    let es = i32(us >> 23u) - 150;
    var r = 1.0 / s;
    for (var i = 0u; i < 4u; i++) {
        if (!qf_normal(r)) { break; }
        let ur = bitcast<u32>(r);
        let mr = (ur & 0x7fffffu) | 0x800000u;
        let er = i32(ur >> 23u) - 150;
        let E = 1 - er - es; // about 47 .. 49
        if (E < 40 || E > 62) { break; }
        let P = vec2<u32>(1u << u32(E - 32), 0u); // 2^E as (hi, lo): 40 <= E <= 62
        let hi = mul24(2u * mr + 1u, ms);
        if (!qf_lt(P, hi)) { r = bitcast<f32>(ur + 1u); continue; }
        var below: bool;
        if (mr == 0x800000u) {
            below = qf_lt(vec2<u32>(P.x << 1u, 0u), mul24(4u * mr - 1u, ms));
        } else {
            below = qf_lt(P, mul24(2u * mr - 1u, ms));
        }
        if (below) { r = bitcast<f32>(ur - 1u); continue; }
        return r;
    }
    return div_rn(1.0, s);
}
