// round64.wgsl — correctly rounded float32 division and square root (WGSL only promises 2.5 ulp
// for f32 division): computed in f64, then checked against the exact midpoints and moved by one
// step if needed. For positive normal operands and results in float32's normal range (a
// subnormal may be flushed on its way to or from f64); anything else takes the integer
// versions (round32.wgsl). Needs shader-f64.
fn normal_pos(x: f32) -> bool { return bitcast<u32>(x) - 0x00800000u < 0x7f000000u; } // in [2^-126, inf)
fn div_rn(a: f32, b: f32) -> f32 {
    if (!(FAST && normal_pos(a) && normal_pos(b))) { return div_rn_int(a, b); }
    let q64 = f64(a) / f64(b);
    if (!(q64 >= f64(bits_f32(0x00800000u)) && q64 < f64(bits_f32(0x7f7fffffu)))) { return div_rn_int(a, b); }
    var q = f32(q64);
    let A = f64(a);
    let Bd = f64(b);
    // a - m*b is exact in f64 (m has at most 25 significant bits); a quotient never is a midpoint
    let up = next_up_pos(q);
    if (A - (f64(q) + f64(up)) * 0.5 * Bd > 0.0) { return up; }
    let dn = next_down_pos(q);
    if (A - (f64(q) + f64(dn)) * 0.5 * Bd < 0.0) { return dn; }
    return q;
}
fn sqrt_rn(x: f32) -> f32 {
    if (!(FAST && normal_pos(x))) { return sqrt_rn_int(x); } // roots of normal values are normal
    var r = f32(sqrt(f64(x)));
    let X = f64(x);
    let mu = (f64(r) + f64(next_up_pos(r))) * 0.5; // m*m is exact in f64 (50 bits)
    if (mu * mu < X) { return next_up_pos(r); }
    let md = (f64(r) + f64(next_down_pos(r))) * 0.5;
    if (md * md > X) { return next_down_pos(r); }
    return r;
}

// QKNorm's sum-of-squares accumulator: the CPU's double lanes (v*v is exact in f64, so a fused
// multiply-add rounds the same value)
alias Acc = f64;
fn acc_zero() -> Acc { return 0.0; }
// f64_of: slow_f64.wgsl (every wide64 variant includes it)
fn acc_add_sq(acc: Acc, v: f32) -> Acc {
    let d = f64_of(v);
    return acc + d * d;
}
fn acc_add(a: Acc, b: Acc) -> Acc { return a + b; }
// the sum (>= 0, or NaN) rounded to float32 as the CPU's (float) conversion (f32_of); a NaN fails
// every comparison (no self-comparison, which a compiler may fold)
fn acc_f32(a: Acc) -> f32 {
    if (a >= 0.0) { return bits_f32(f32_of(a)); }
    return bits_f32(QNAN);
}
