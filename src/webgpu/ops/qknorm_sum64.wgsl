// qknorm_sum64.wgsl — the row kernel's fast sum of squares with shader-f64 (see qknorm_row.wgsl):
// the squares (exact in f64) summed in any order, and the float32 it decides, if it can.
alias Fs = f64;
fn fs_zero() -> Fs { return f64(0.0); }
fn fs_add_sq(a: Fs, v: f32) -> Fs { return a + f64(v) * f64(v); }
fn fs_add(a: Fs, b: Fs) -> Fs { return a + b; }

// the RL partial sums part[o .. o + RL - 1] of a row as a balanced tree (straight-line: the loads
// issue together, five or six additions deep)
fn fs_part8(o: u32) -> Fs {
    return ((part[o] + part[o + 1u]) + (part[o + 2u] + part[o + 3u])) +
           ((part[o + 4u] + part[o + 5u]) + (part[o + 6u] + part[o + 7u]));
}
fn fs_row(o: u32) -> Fs {
    let h = (fs_part8(o) + fs_part8(o + 8u)) + (fs_part8(o + 16u) + fs_part8(o + 24u));
    if (RL == 32u) { return h; }
    return h + ((fs_part8(o + 32u) + fs_part8(o + 40u)) + (fs_part8(o + 48u) + fs_part8(o + 56u)));
}

// the factor 1 / sqrt(v), both steps rounded to nearest: the adapter's float32 sqrt and quotient
// (any accuracy) as candidates, each moved by up to two steps by exact f64 tests, else
// round64.wgsl's sqrt_rn / div_rn (f64 sqrt and division with midpoint checks: a longer chain)
fn qk_factor(v: f32) -> f32 { return qk_recip(qk_sqrt(v)); }
// positive normal x whose next float32 down is normal too (the tests' neighbours convert exactly)
fn qk_normal2(x: f32) -> bool { return bitcast<u32>(x) - 0x00800001u < 0x7effffffu; }
// RN(sqrt(x)): r is it iff md^2 < x < mu^2 for the midpoints md, mu between r and its neighbours
// (25 significant bits: the squares are exact in f64; a root of a float32 is never a midpoint)
fn qk_sqrt(x: f32) -> f32 {
    if (!(FAST && normal_pos(x))) { return sqrt_rn(x); }
    let X = f64(x);
    var r = sqrt(x);
    for (var i = 0u; i < 3u; i++) {
        if (!qk_normal2(r)) { break; }
        let mu = (f64(r) + f64(next_up_pos(r))) * 0.5;
        if (mu * mu < X) { r = next_up_pos(r); continue; }
        let md = (f64(r) + f64(next_down_pos(r))) * 0.5;
        if (md * md > X) { r = next_down_pos(r); continue; }
        return r;
    }
    return sqrt_rn(x);
}
// RN(1/s): q is it iff md * s < 1 < mu * s (the products exact in f64: 25 and 24 significant bits;
// the comparison with 1 is exact whatever the difference's rounding; a quotient is never a midpoint)
fn qk_recip(s: f32) -> f32 {
    if (!(FAST && normal_pos(s))) { return div_rn(1.0, s); }
    let S = f64(s);
    var q = 1.0 / s;
    for (var i = 0u; i < 3u; i++) {
        if (!qk_normal2(q)) { break; }
        let mu = (f64(q) + f64(next_up_pos(q))) * 0.5;
        if (mu * S < 1.0) { q = next_up_pos(q); continue; }
        let md = (f64(q) + f64(next_down_pos(q))) * 0.5;
        if (md * S > 1.0) { q = next_down_pos(q); continue; }
        return q;
    }
    return div_rn(1.0, s);
}

// (float32 bits, 1) where every summation order the contract allows gives that float32, else
// (0, 0). none: every value zero (the sum is +0). g: every square is a multiple of 2^g.
//  - sums that are not normal float32 values (or their conversions) are left to the exact path;
//  - a < 2^(g + 53): every partial sum of any order is a multiple of 2^g below 2^(g + 53), so
//    exact in double: a is the exact sum and so is the contract's (the computed a can only be
//    below 2^(g + 53) if every partial sum was, so exact);
//  - else the contract's sum lies within (131 + 37) * 2^-53 * S < 1e-12 * a of a, and every
//    value in [a - 1e-12 a, a + 1e-12 a] rounds to the same float32 where both ends do
//    (rounding is monotone).
fn fs_f32(a: Fs, g: i32, none: bool) -> vec2<u32> {
    if (none) { return vec2<u32>(0u, 1u); }
    if (!(a >= 1.2e-38) || !(a <= 3.0e38)) { return vec2<u32>(0u, 0u); }
    let c = f32(a);
    // a <= c (1 + 2^-24) < 2^(e + 1) with e c's exponent: exact where e + 1 < g + 53
    if (i32(bitcast<u32>(c) >> 23u) - 126 < g + 53) { return vec2<u32>(bitcast<u32>(c), 1u); }
    let d = a * 1e-12;
    return vec2<u32>(bitcast<u32>(c), select(0u, 1u, f32(a - d) == c && f32(a + d) == c));
}
