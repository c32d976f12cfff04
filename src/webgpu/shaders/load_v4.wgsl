// load_v4.wgsl — read accessor of a tensor $N bound as array<vec4<u32>> $B (16-byte vectors;
// the kernel unpacks the elements).
fn ld4_$N(q: u32) -> vec4<u32> { return $B[q]; }
