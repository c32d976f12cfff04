// store_atomic.wgsl — write accessors of a packed 16-bit tensor $N ($F: f16 or bf16) whose
// layout does not let one invocation own whole words: each 16-bit half is replaced with two
// atomics (clear, then set), so a neighbour writing the other half at the same time is never lost.
fn st1raw_$N(e: u32, r: u32) {
    let sh = (e & 1u) * 16u;
    atomicAnd(&$B[e >> 1u], ~(0xffffu << sh));
    atomicOr(&$B[e >> 1u], (r & 0xffffu) << sh);
}
fn st2raw_$N(e: u32, step: u32, r0: u32, r1: u32) {
    st1raw_$N(e, r0);
    st1raw_$N(e + step, r1);
}
fn st2_$N(e: u32, step: u32, v0: f32, v1: f32) {
    st2raw_$N(e, step, f32_to_$F_bits(v0), f32_to_$F_bits(v1));
}
