// store_v4.wgsl — write accessor of a tensor $N bound as array<vec4<u32>> $B.
fn st4_$N(q: u32, v: vec4<u32>) { $B[q] = v; }
