// load_packed.wgsl — read accessors of a 16-bit tensor $N ($F: f16 or bf16) stored two per u32
// in array<u32> $B (element e is the low half of word e/2 when e is even).
fn raw_$N(e: u32) -> u32 { return ($B[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu; }
fn ld_$N(e: u32) -> f32 { return $F_bits_to_f32(raw_$N(e)); }
fn rt_$N(v: f32) -> f32 { return $F_bits_to_f32(f32_to_$F_bits(v)); }
