// round64.wgsl — correctly rounded float32 division and square root (WGSL only promises 2.5 ulp
// for f32 division): computed in f64, then checked against the exact midpoints and moved by one
// step if needed. For the positive operands ropekit uses. Needs shader-f64.
fn div_rn(a: f32, b: f32) -> f32 {
    var q = f32(f64(a) / f64(b));
    if (!(a > 0.0) || !(b > 0.0) || !(q > 0.0) || q > 3.0e38) { return q; }
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
    var r = f32(sqrt(f64(x)));
    if (!(x > 0.0) || !(r > 0.0) || r > 3.0e38) { return r; }
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
fn acc_add_sq(acc: Acc, v: f32) -> Acc { return acc + f64(v) * f64(v); }
fn acc_add(a: Acc, b: Acc) -> Acc { return a + b; }
fn acc_f32(a: Acc) -> f32 { return f32(a); }
