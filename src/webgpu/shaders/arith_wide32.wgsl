// arith_wide32.wgsl — no shader-f64: a*b + c*d in float32. Not the CPU's double arithmetic: the
// products are rounded (or fused by the compiler: WGSL lets it contract, and error-free
// transformations do not survive the shader compilers' algebraic rewrites), so the result is
// within about 1 ulp of the larger product of the CPU's value. Used only when the device or the
// context has no shader-f64; ropekit_webgpu_last_variant() says "wide32".
fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 { return a * b + c * d; }
