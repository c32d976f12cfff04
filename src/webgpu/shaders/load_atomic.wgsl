// load_atomic.wgsl — read accessors of a 16-bit tensor $N ($F: f16 or bf16) packed two per word
// in an array<atomic<u32>> $B (the written tensor of a layout whose elements do not pair into
// words; read through it when in place).
fn raw_$N(e: u32) -> u32 { return (atomicLoad(&$B[e >> 1u]) >> ((e & 1u) * 16u)) & 0xffffu; }
fn ld_$N(e: u32) -> f32 { return $F_bits_to_f32(raw_$N(e)); }
fn rt_$N(v: f32) -> f32 { return $F_bits_to_f32(f32_to_$F_bits(v)); }
