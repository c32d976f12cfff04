// load_f32.wgsl — read accessors of a float32 tensor $N stored in array<f32> $B.
fn ld_$N(e: u32) -> f32 { return $B[e]; }
fn raw_$N(e: u32) -> u32 { return bitcast<u32>($B[e]); }
fn rt_$N(v: f32) -> f32 { return v; }
