// rotary_vec_cs.wgsl — half_cs for the vector kernel with scalar table loads: the cos/sin of the
// four words of a half-split vector (columns k0 + j EW .. + EW - 1, j = 0..3), see word_cs.
fn half_cs(b: u32, s: u32, k0: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(word_cs(b, s, k0), word_cs(b, s, k0 + EW), word_cs(b, s, k0 + 2u * EW),
                               word_cs(b, s, k0 + 3u * EW));
}
