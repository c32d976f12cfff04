// slow_int.wgsl — the slow paths of the fast float arithmetic without shader-f64: the integer
// functions of exact_f32.wgsl.
fn mul_slow(ua: u32, ub: u32) -> u32 { return mul_bits(ua, ub); }
fn add_slow(ua: u32, ub: u32) -> u32 { return add_bits(ua, ub); }
fn dot2_float_slow(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 { return dot2_float_bits(ua, ub, uc, ud); }
fn dot2_wide_slow(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 { return dot2_wide_bits(ua, ub, uc, ud); }
