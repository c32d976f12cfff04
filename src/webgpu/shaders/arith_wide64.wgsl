// arith_wide64.wgsl — products in f64 (shader-f64): float32 x float32 is exact in f64, the sum is
// rounded to f64 and then to f32: the CPU's double arithmetic, operation for operation.
fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 { return f32(f64(a) * f64(b) + f64(c) * f64(d)); }
