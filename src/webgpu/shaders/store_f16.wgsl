// store_f16.wgsl — write accessors of a float16 tensor $N in array<f16> $B (shader-f16). The
// value is rounded with integer arithmetic first, so the conversion to f16 is exact.
fn st2raw_$N(e: u32, step: u32, r0: u32, r1: u32) {
    $B[e] = f16(f16_bits_to_f32(r0));
    $B[e + step] = f16(f16_bits_to_f32(r1));
}
fn st2_$N(e: u32, step: u32, v0: f32, v1: f32) {
    st2raw_$N(e, step, f32_to_f16_bits(v0), f32_to_f16_bits(v1));
}
