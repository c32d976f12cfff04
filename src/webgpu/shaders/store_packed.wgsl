// store_packed.wgsl — write accessors of a packed 16-bit tensor $N ($F: f16 or bf16): the two
// elements e (even) and e+1 of one word (step is 1: the host picks this only for layouts that
// pair elements into words).
fn st2raw_$N(e: u32, step: u32, r0: u32, r1: u32) { $B[e >> 1u] = r0 | (r1 << 16u); }
fn st2_$N(e: u32, step: u32, v0: f32, v1: f32) {
    st2raw_$N(e, step, f32_to_$F_bits(v0), f32_to_$F_bits(v1));
}
