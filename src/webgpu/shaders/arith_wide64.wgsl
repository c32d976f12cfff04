// arith_wide64.wgsl — products in f64 (shader-f64): float32 x float32 is exact in f64, the sum is
// rounded to f64 and then to f32: the CPU's double arithmetic, operation for operation.
//   dot2_fast: the hardware conversions, where they cannot depend on what the adapter does with
//   subnormals (WGSL lets it flush them) or leave float32's range: every operand zero or normal,
//   the double result zero or in float32's normal range; slow_hit set otherwise.
//   ok4 / rot_nc: the vector kernel's fast path, with the check hoisted to the operands (ok4 on
//   each loaded x vector and on its cos/sin) and none on the result: every operand zero or with
//   2^-40 <= |v| < 2^63 (biased exponent 87 .. 189). Such an operand's last significand bit is
//   worth at least 2^-63 (float32: 2^(e-23), e >= -40; bfloat16 and float16 coarser), so both
//   exact products are multiples of 2^-126 below 2^126 and so is their exact sum: r is zero or
//   2^-126 <= |r| < 2^127. The f64 products are exact (48 bits) and normal, their sum rounds once
//   (a fused multiply-add rounds the same value: the other product is exact), and r converts to
//   float32 inside its normal range: nothing depends on flushing or contraction.
//   dot2_slow / dot2: the same arithmetic written so that no step depends on it: the operands
//   go to f64 exactly (f64_of), the result comes back with f32_of (slow_f64.wgsl), infinities
//   and NaNs follow the CPU's rules (dot2_wide_special); branch-free. FAST false (tests): the
//   integer exact32 path.
// (& and | rather than && and ||: no short-circuit, so no control flow at each call, which slowed
// the compilation of every kernel)
const SLOW_PATH: bool = true; // the element kernel's slow path exists (arith_exact32.wgsl)
fn wide_ok(u: u32) -> bool { return (((u >> 23u) & 0xffu) - 1u < 254u) | ((u & 0x7fffffffu) == 0u); }
// ok4's window (common.wgsl): biased exponents 87 .. 189
const WIN_LO: u32 = 87u;
const WIN_N: u32 = 103u;
// the rotation (c a - s b, s a + c b) of operands in the window, in f64 (four conversions, the
// negation exact in f64)
fn rot_nc(a: f32, b: f32, c: f32, s: f32) -> vec2<f32> {
    let A = f64(a);
    let B = f64(b);
    let C = f64(c);
    let S = f64(s);
    return vec2<f32>(f32(C * A - S * B), f32(S * A + C * B));
}
fn dot2_fast(a: f32, b: f32, c: f32, d: f32) -> f32 {
    let ok = FAST & wide_ok(bitcast<u32>(a)) & wide_ok(bitcast<u32>(b)) & wide_ok(bitcast<u32>(c)) &
             wide_ok(bitcast<u32>(d));
    let r = f64(a) * f64(b) + f64(c) * f64(d);
    let m = abs(r);
    slow_hit = slow_hit | !(ok & ((r == 0.0) | ((m >= f64(bits_f32(0x00800000u))) & (m <= f64(bits_f32(0x7f7fffffu))))));
    return f32(r);
}
fn dot2_slow(a: f32, b: f32, c: f32, d: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let uc = bitcast<u32>(c);
    let ud = bitcast<u32>(d);
    if (!FAST) { return dot2_wide_bits(ua, ub, uc, ud); }
    return dot2_wide_slow(ua, ub, uc, ud);
}
fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 { return dot2_slow(a, b, c, d); }
