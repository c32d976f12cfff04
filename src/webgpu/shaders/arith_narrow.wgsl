// arith_narrow.wgsl — x and tables both 16-bit: the CPU computes a*b + c*d in float, each
// product rounded to float32, then the sum. Fast path: every operand zero or of magnitude in
// [2^-53, 2^63) (biased exponent 74 .. 189). The operands have at most 11 significant bits, so
// each product is then exact and normal, the two products' sum is zero or at least 2^-126 (both
// are multiples of 2^-126) and finite: a*b + c*d rounds once, to the same bits whether the adapter
// flushes subnormals or fuses the multiply-add. Anything else (subnormal, tiny or huge operands,
// infinities, NaNs) takes the slow path (dot2_float_slow: slow_int.wgsl or, with shader-f64,
// slow_f64.wgsl), which rounds as the CPU does.
//   dot2_fast: the fast path, slow_hit set where it does not apply; dot2_slow: the slow path;
//   dot2: either, per call. ok4 / rot_nc: the same fast path with the operand check hoisted (the
//   vector kernel checks each loaded x vector and its cos/sin once with ok4, then rotates with
//   rot_nc, which checks nothing).
const SLOW_PATH: bool = true; // the element kernel's slow path exists (arith_exact32.wgsl)
// (& and | rather than && and ||: no short-circuit, so no control flow at each call, which slowed
// the compilation of every kernel)
fn narrow_ok(u: u32) -> bool { return (((u >> 23u) & 0xffu) - 74u < 116u) | ((u & 0x7fffffffu) == 0u); }
fn narrow_ok4(a: f32, b: f32, c: f32, d: f32) -> bool {
    return FAST & narrow_ok(bitcast<u32>(a)) & narrow_ok(bitcast<u32>(b)) & narrow_ok(bitcast<u32>(c)) &
           narrow_ok(bitcast<u32>(d));
}
// ok4's window (common.wgsl): narrow_ok's, biased exponents 74 .. 189
const WIN_LO: u32 = 74u;
const WIN_N: u32 = 116u;
// the rotation (c a - s b, s a + c b) of operands in the window: exact products, one rounding each
fn rot_nc(a: f32, b: f32, c: f32, s: f32) -> vec2<f32> { return vec2<f32>(c * a - s * b, s * a + c * b); }
fn dot2_fast(a: f32, b: f32, c: f32, d: f32) -> f32 {
    slow_hit = slow_hit | !narrow_ok4(a, b, c, d);
    return a * b + c * d;
}
fn dot2_slow(a: f32, b: f32, c: f32, d: f32) -> f32 {
    return dot2_float_slow(bitcast<u32>(a), bitcast<u32>(b), bitcast<u32>(c), bitcast<u32>(d));
}
fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 {
    if (narrow_ok4(a, b, c, d)) { return a * b + c * d; }
    return dot2_slow(a, b, c, d);
}
