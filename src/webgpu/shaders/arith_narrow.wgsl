// arith_narrow.wgsl — x and tables both 16-bit: products of two 11- (or 8-) bit significands are
// exact in float32, so a*b + c*d is rounded once, exactly as the CPU computes it in float.
// (A fused multiply-add would round the same value: its product is exact too.)
fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 { return a * b + c * d; }
