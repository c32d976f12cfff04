// store_f32.wgsl — write accessors of a float32 tensor $N in array<f32> $B: elements e, e+step.
fn st2_$N(e: u32, step: u32, v0: f32, v1: f32) { $B[e] = v0; $B[e + step] = v1; }
fn st2raw_$N(e: u32, step: u32, r0: u32, r1: u32) {
    $B[e] = bitcast<f32>(r0);
    $B[e + step] = bitcast<f32>(r1);
}
