// load_tv32.wgsl — a float32 table $N bound as array<vec4<u32>> $B (16-byte vectors of 4
// columns: the vector rotary kernel's table loads, ld4_$N); ld_$N / rt_$N as load_f32.wgsl.
fn ld4_$N(q: u32) -> vec4<u32> { return $B[q]; }
fn ld_$N(e: u32) -> f32 { return bitcast<f32>($B[e >> 2u][e & 3u]); }
fn rt_$N(v: f32) -> f32 { return v; }
