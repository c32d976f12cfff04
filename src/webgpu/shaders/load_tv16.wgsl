// load_tv16.wgsl — a 16-bit table $N ($F) bound as array<vec4<u32>> $B (16-byte vectors of 8
// columns: the vector rotary kernel's table loads, ld4_$N); ld_$N / rt_$N as load_packed.wgsl.
fn ld4_$N(q: u32) -> vec4<u32> { return $B[q]; }
fn ld_$N(e: u32) -> f32 { return $F_bits_to_f32(($B[e >> 3u][(e >> 1u) & 3u] >> ((e & 1u) * 16u)) & 0xffffu); }
fn rt_$N(v: f32) -> f32 { return $F_bits_to_f32(f32_to_$F_bits(v)); }
