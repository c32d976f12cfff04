// load_bf16a.wgsl — read accessors of a bfloat16 tensor $N packed two per word in an
// array<atomic<u32>> $B (the written tensor of a layout whose elements do not pair into words).
fn raw_$N(e: u32) -> u32 { return (atomicLoad(&$B[e >> 1u]) >> ((e & 1u) * 16u)) & 0xffffu; }
fn ld_$N(e: u32) -> f32 { return bf16_bits_to_f32(raw_$N(e)); }
fn rt_$N(v: f32) -> f32 { return bf16_bits_to_f32(f32_to_bf16_bits(v)); }
