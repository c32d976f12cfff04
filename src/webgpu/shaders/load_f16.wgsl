// load_f16.wgsl — read accessors of a float16 tensor $N in array<f16> $B (shader-f16). float16
// to float32 is exact, so the raw bits are recovered from the widened value (NaN payloads aside).
fn ld_$N(e: u32) -> f32 { return f32($B[e]); }
fn raw_$N(e: u32) -> u32 { return f32_to_f16_bits(f32($B[e])); }
fn rt_$N(v: f32) -> f32 { return f16_bits_to_f32(f32_to_f16_bits(v)); }
